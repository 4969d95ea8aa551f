"""Push trajectory records to the service, from a background thread, without ever blocking training.

    POST {url}/v1/jobs/{job_id}/ingest    {"records": [<WindowRecord.to_dict()>, ...]}
    Authorization: Bearer {token}

The service upserts by window index, so re-sending a record (a retry, or a window re-run after a
worker-group restart) replaces it. What waits to be sent is a map window -> latest record, bounded by the
run's window count: `offer()` only updates it and wakes the thread, a failed POST leaves its records there
for the next try (exponential backoff), and a newer version of a window replaces an unsent older one.
Records are also in trajectory.jsonl, so a service that stays down loses nothing.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any


class ServicePusher:
    def __init__(
        self,
        url: str,
        job_id: str,
        token: str,
        *,
        batch: int = 256,
        timeout_s: float = 10.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
    ) -> None:
        self.endpoint = f"{url.rstrip('/')}/v1/jobs/{job_id}/ingest"
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.batch, self.timeout_s = batch, timeout_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self._pending: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._closed = self._stopped = False
        self.sent = 0
        self.failures = 0
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name="hdet-service-push", daemon=True)
        self._thread.start()

    def offer(self, record: dict[str, Any]) -> None:
        """Queue a record (replacing an unsent one of the same window); never blocks on the network."""
        with self._cond:
            self._pending[int(record["window"])] = record
            self._cond.notify()

    @property
    def unsent(self) -> int:
        with self._cond:
            return len(self._pending)

    def close(self, timeout_s: float = 30.0) -> int:
        """Try to send what is left within `timeout_s`, stop the thread; returns how many stayed unsent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)
        with self._cond:
            self._stopped = True
            self._cond.notify()
        return self.unsent

    def _run(self) -> None:
        delay = 0.0
        while True:
            with self._cond:
                if delay:  # backoff: only stopping cuts it short
                    self._cond.wait_for(lambda: self._stopped, timeout=delay)
                self._cond.wait_for(lambda: self._pending or self._closed or self._stopped)
                if self._stopped or (self._closed and not self._pending):
                    return
                batch = [self._pending[w] for w in sorted(self._pending)[: self.batch]]
            if not self._post(batch):
                self.failures += 1
                delay = min(max(delay * 2, self.backoff_s), self.max_backoff_s)
                continue
            delay = 0.0
            with self._cond:
                for r in batch:  # keep a newer version offered while this one was in flight
                    if self._pending.get(int(r["window"])) is r:
                        del self._pending[int(r["window"])]
            self.sent += len(batch)

    def _post(self, records: list[dict[str, Any]]) -> bool:
        body = json.dumps({"records": records}, allow_nan=False).encode()
        request = urllib.request.Request(self.endpoint, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.last_error = f"{type(e).__name__}: {e}"
            return False
