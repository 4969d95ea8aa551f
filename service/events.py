"""Wake-ups for live streams: ingest (a worker thread) notifies, SSE handlers (the event loop) wait.

A subscriber registers before it reads the database, so a notice between its read and its wait is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict


class Broker:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subs: dict[str, set[asyncio.Event]] = defaultdict(set)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, job_id: str) -> None:
        """Thread-safe: wake every stream of this job."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, job_id)

    def _wake(self, job_id: str) -> None:
        for ev in self._subs.get(job_id, ()):
            ev.set()

    @contextlib.contextmanager
    def subscribe(self, job_id: str):
        ev = asyncio.Event()
        self._subs[job_id].add(ev)
        try:
            yield ev
        finally:
            self._subs[job_id].discard(ev)
            if not self._subs[job_id]:
                del self._subs[job_id]

    @property
    def streams(self) -> int:
        return sum(len(s) for s in self._subs.values())
