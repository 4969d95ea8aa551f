"""The embedded default: a local Ray head the service starts, owns, and ends (never `ray stop`).

The head runs as `ray start --head --block` in its own process group with token auth set explicitly
(RAY_AUTH_MODE=token and a token file under the data directory). Its address and pid are kept in
<data_dir>/ray-head.json, so a service that was killed or restarted adopts the head its jobs still
run on instead of starting a second one.

Its size is fixed: `num_cpus` logical CPUs, by default the machine's cores but at least
`MIN_CPUS`, so that the spec defaults and the README's examples (4 replicas) run on a 2-core machine
(CPU workers then share cores, as `hdet run` lets them).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

# Ray's session directories hold Unix sockets, whose paths are limited to 107 bytes: the temp dir, then
# "/session_2026-11-30_16-51-39_902061_22802" (up to 44 with a 7-digit pid) and "/sockets/dash_MetricsHead"
# (25). A longer temp dir (pytest's /tmp/pytest-of-root/pytest-65/... is 45) kills the dashboard at start.
_MAX_TEMP_DIR = 36
_OBJECT_STORE_BYTES = 300 * 1024 * 1024  # the service's jobs pass tensors through collectives, not the store
MIN_CPUS = 4
START_ATTEMPTS = 3
"""How many times `EmbeddedHead.start` starts a head that exits while it starts (within its deadline)."""


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1. Every socket stays bound until all are chosen: chosen one at
    a time, the kernel may hand out a port just released (seen in CI: the head's GCS and its dashboard agent
    were both given 44023, and the head would not start)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def free_port() -> int:
    return free_ports(1)[0]


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port` (0: a free port), for uvicorn to serve from (`Server.run(sockets=
    [...])`). A server that starts a Ray head in its lifespan must hold its port before that: a port only
    probed (`free_port`) can be taken by the head's processes before uvicorn binds it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(slots=True)
class HeadInfo:
    pid: int
    gcs_port: int
    dashboard_port: int
    temp_dir: str
    num_cpus: int | None = None

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"


class EmbeddedHead:
    def __init__(self, data_dir: Path, num_cpus: int | None = None) -> None:
        self.data_dir = data_dir
        self.num_cpus = num_cpus or max(os.cpu_count() or 1, MIN_CPUS)
        self.info_file = data_dir / "ray-head.json"
        self.token_file = data_dir / "ray-token"
        self.info: HeadInfo | None = None
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def token(self) -> str:
        if not self.token_file.exists():
            self.token_file.touch(mode=0o600)
            self.token_file.write_text(secrets.token_hex(32))
        return self.token_file.read_text().strip()

    def env(self) -> dict[str, str]:
        """Environment for processes of this head (and its jobs): token auth, explicitly."""
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_file)}

    def start(self, timeout_s: float = 180.0) -> HeadInfo:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        adopted = self._adopt()
        if adopted:
            self.info = adopted
            return adopted
        temp_dir = self.data_dir.resolve() / "ray"
        if len(str(temp_dir)) > _MAX_TEMP_DIR:
            temp_dir = Path(tempfile.mkdtemp(prefix="hdet-ray-"))
        # Every port Ray would otherwise take at a fixed default too, so heads of other users can coexist.
        port_flags = (
            "--port",
            "--dashboard-port",
            "--ray-client-server-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--runtime-env-agent-port",
            "--metrics-export-port",
        )
        base_cmd = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            "--dashboard-host",
            "127.0.0.1",
            "--include-dashboard",
            "true",
            "--temp-dir",
            str(temp_dir),
            "--disable-usage-stats",
            "--node-ip-address",
            "127.0.0.1",
            "--object-store-memory",
            str(_OBJECT_STORE_BYTES),
            "--num-cpus",
            str(self.num_cpus),
        ]
        self.token  # noqa: B018  (creates the token file before the head reads it)
        self._log = log = open(self.data_dir / "ray-head.log", "ab")  # noqa: SIM115  (open while the head runs)
        # Ray gives its dashboard 60 s to come up and then ends the head; on a busy 2-CPU machine loading its
        # modules took longer (seen in CI). Waiting is this method's job: the head gets the same deadline.
        # On SIGTERM Ray drains the node for up to 30 s before it ends its processes (for a Kubernetes pod
        # whose Serve proxies still route to it). This head's owner is ending it (`stop`): no drain, which
        # had made a stop wait up to 30 s.
        env = {
            "RAY_DASHBOARD_STARTUP_TIMEOUT_S": str(int(timeout_s)),
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            **self.env(),
        }
        deadline = time.monotonic() + timeout_s
        for attempt in range(1, START_ATTEMPTS + 1):
            ports = free_ports(len(port_flags))  # each try on new ports
            gcs_port, dash_port = ports[:2]
            cmd = base_cmd + [
                x for flag, port in zip(port_flags, ports, strict=True) for x in (flag, str(port))
            ]
            self._proc = subprocess.Popen(
                cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
            )
            info = HeadInfo(self._proc.pid, gcs_port, dash_port, str(temp_dir), self.num_cpus)
            while not self._ready(info):
                if self._proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the embedded Ray head did not come up in {timeout_s:.0f} s")
                time.sleep(0.5)
            else:
                self.info = info
                self.info_file.write_text(json.dumps(asdict(info)))
                return info
            # `ray start` gives its raylet 30 s to register (not configurable) and exits if it has not: seen
            # on a loaded 2-CPU machine, with the GCS and the dashboard already up. End what is left of that
            # try (its process group) and start afresh, on new ports, while the deadline allows.
            _signal_group(self._proc.pid, signal.SIGKILL)
            code = self._proc.returncode
            log.write(f"\n[hdet] the Ray head exited ({code}) while starting, try {attempt}\n".encode())
            log.flush()
            if time.monotonic() > deadline:
                break
        raise RuntimeError(
            f"the embedded Ray head exited ({code}) while starting, {attempt} time(s); "
            f"see {self.data_dir / 'ray-head.log'}"
        )

    def _ready(self, info: HeadInfo) -> bool:
        """The dashboard answers and lists this head's node as alive: the dashboard comes up before the
        raylet has registered (about 1.5 s here), and a node that never registers ends `ray start`."""
        req = urllib.request.Request(
            info.dashboard_url + "/api/v0/nodes", headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                nodes = json.loads(r.read())["data"]["result"]["result"]
        except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
            return False
        return any(node.get("state") == "ALIVE" for node in nodes)

    def _adopt(self) -> HeadInfo | None:
        try:
            info = HeadInfo(**json.loads(self.info_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        if _alive(info.pid) and self._ready(info):
            self.num_cpus = info.num_cpus or self.num_cpus
            return info
        self.info_file.unlink(missing_ok=True)
        return None

    def alive(self) -> bool:
        """Whether the head's process still runs (`ray start --block` exits when a part of it dies)."""
        if self._proc is not None:
            return self._proc.poll() is None
        return self.info is not None and _alive(self.info.pid)

    def release(self) -> None:
        """Leave the head running for the next service on this data directory to adopt."""
        if self._log:
            self._log.close()
        self._proc = None
        self.info = None

    def stop(self, timeout_s: float = 30.0) -> None:
        """End exactly the head this service started or adopted (its process group)."""
        pid = self._proc.pid if self._proc else (self.info.pid if self.info else None)
        if pid is not None:
            # `ray start --block` ends its own processes on SIGTERM; whatever is left of its group goes after.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                if self._proc:
                    self._proc.poll()
                time.sleep(0.2)
            _signal_group(pid, signal.SIGKILL)
            if self._proc:
                self._proc.wait(timeout=10)
        self.info_file.unlink(missing_ok=True)
        if self.info and self.info.temp_dir.startswith(tempfile.gettempdir() + "/hdet-ray-"):
            shutil.rmtree(self.info.temp_dir, ignore_errors=True)
        if self._log:
            self._log.close()
        self._proc = None
        self.info = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own exited child) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
