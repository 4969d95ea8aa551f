"""The Ray layer's plain parts, without a Ray cluster: trajectory log, service pusher, controller host,
generation search. Real files and a real HTTP server."""

from __future__ import annotations

import json
import math
import time

import pytest

from hdet_ray.core.controller import ParamWindow, Window, make_controller
from hdet_ray.core.records import WindowRecord
from hdet_ray.ray.actor import ControllerHost
from hdet_ray.ray.push import ServicePusher
from hdet_ray.ray.search import GenerationSearch
from hdet_ray.ray.trajectory import TrajectoryLog, read_trajectory
from hdet_ray.spec import JobSpec


def _record(w: int) -> dict:
    return {"window": w, "step": 10 * (w + 1), "metrics": {}}


def test_trajectory_rewind_rewrites_each_window_once(tmp_path):
    log = TrajectoryLog(tmp_path / "trajectory.jsonl")
    for w in range(5):
        log.append(_record(w))
    assert log.rewind(2) == 3
    with pytest.raises(ValueError, match="expected window 2"):
        log.append(_record(4))
    for w in range(2, 6):
        log.append(_record(w))
    log.update_last({"val_loss": 0.25})
    rows = read_trajectory(tmp_path / "trajectory.jsonl")
    assert [r["window"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert rows[-1]["metrics"] == {"val_loss": 0.25}


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_pusher_retries_and_upserts_newest_version(ingest):
    pusher = ServicePusher(ingest.url, "job1", "secret", backoff_s=0.05)
    for w in range(3):
        pusher.offer({"window": w, "v": 1})
    pusher.offer({"window": 1, "v": 2})  # a window re-run after a restart replaces the unsent one
    assert pusher.close(timeout_s=20) == 0
    assert len(ingest.requests) >= 3  # two 503s, then success
    assert all(r["auth"] == "Bearer secret" for r in ingest.requests)
    assert {w: r["v"] for w, r in ingest.by_job["job1"].items()} == {0: 1, 1: 2, 2: 1}
    assert pusher.failures == 2


def test_pusher_never_blocks_and_keeps_records_while_service_is_down():
    pusher = ServicePusher("http://127.0.0.1:9", "job", "t", backoff_s=0.05, timeout_s=0.5)  # nothing listens
    t0 = time.perf_counter()
    for w in range(100):
        pusher.offer({"window": w})
    offer_s = time.perf_counter() - t0
    assert _wait(lambda: pusher.failures >= 2)
    assert pusher.close(timeout_s=0.2) == 100
    assert offer_s < 5  # offer() does no I/O (a loose bound: this is not a timing test)
    assert "URLError" in pusher.last_error or "Error" in pusher.last_error


def _window(w: int, losses, offset=0.0) -> Window:
    coords = tuple(math.log(m) for m in (0.5, 0.79, 1.26, 2.0))
    p = ParamWindow(
        scale="log",
        base=0.01,
        offset=offset,
        coords=coords,
        values=tuple(0.01 * math.exp(offset + c) for c in coords),
    )
    return Window(
        window=w,
        step=10 * (w + 1),
        total_steps=100,
        losses=tuple(losses),
        healthy=(True,) * 4,
        params={"lr": p},
    )


def _draft(window: Window) -> dict:
    p = window.params["lr"]
    return {
        "window": window.window,
        "step": window.step,
        "total_steps": 100,
        "losses": list(window.losses),
        "start_loss": 1.0,
        "healthy": [True] * 4,
        "excluded": [],
        "reasons": {},
        "weights": [],
        "params": {
            "lr": {
                "base": p.base,
                "offset": p.offset,
                "new_offset": p.offset,
                "multipliers": [0.5, 0.79, 1.26, 2.0],
                "values": list(p.values),
            }
        },
        "metrics": {},
    }


def test_controller_host_matches_the_pure_controller_and_restores(tmp_path):
    spec = JobSpec.parse(
        {
            "task": "digits",
            "replicas": 4,
            "steps": 100,
            "sync_every": 10,
            "controller": {"name": "slope", "trust_windows": 1},
        }
    )
    host = ControllerHost(spec.model_dump(mode="json"), str(tmp_path))
    pure = make_controller("slope", **spec.controller.settings())
    state = pure.initial_state(["lr"])
    host.begin(0, None)
    offset, states = 0.0, []
    for w in range(4):
        win = _window(w, [1.0, 0.9, 0.8, 0.7], offset)
        decision, host_state = host.decide(win, _draft(win))
        state, expected = pure.decide(state, win)
        assert decision == expected
        assert host_state == state.to_dict()
        offset = decision.offsets["lr"]
        states.append(host_state)
    assert decision.offsets["lr"] > 0  # higher rates did better: the centre moved up
    host.begin(2, states[1])  # a restarted group resumes from the checkpoint after window 1
    assert host.restores[-1]["state"] == host.restores[-1]["recorded"] == states[1]
    assert [r["window"] for r in read_trajectory(tmp_path / "trajectory.jsonl")] == [0, 1]
    win = _window(2, [1.0, 0.9, 0.8, 0.7], host.state.offsets["lr"])
    _, again = host.decide(win, _draft(win))
    assert again == states[2]  # same state as before the failure: nothing was decided twice
    assert host.stats()["calls"] == {"begin": 2, "decide": 5}
    rec = WindowRecord.from_dict(json.loads((tmp_path / "trajectory.jsonl").read_text().splitlines()[-1]))
    assert rec.window == 2 and rec.params["lr"].new_offset == again["offsets"]["lr"]


def test_generation_search_finds_a_log_optimum_30x_away():
    optimum = 3e-3
    search = GenerationSearch({"lr": 30 * optimum}, population=4, spread=4.0)
    trials = 0
    while trials < 40:
        for slot in range(4):
            u = math.log(search.proposal(slot)["lr"] / optimum)
            search.report(slot, math.sqrt(1 + u * u))  # not a parabola: linear tails
            trials += 1
        if abs(math.log(search.center["lr"] / optimum)) < math.log(1.5) and search.spread < 2:
            break
    assert abs(math.log(search.center["lr"] / optimum)) < math.log(1.5), search.history
    assert trials <= 32


def test_generation_search_state_roundtrip_resumes_exactly():
    a = GenerationSearch({"lr": 0.1, "wd": 1e-3}, population=5, spread=3.0, seed=7)
    for slot in range(5):
        a.report(slot, slot * 0.1)
    a.report(0, 0.3)
    b = GenerationSearch({"lr": 0.1, "wd": 1e-3}, population=5, spread=3.0, seed=7)
    b.load_dict(json.loads(json.dumps(a.to_dict())))
    assert [b.proposal(s) for s in range(5)] == [a.proposal(s) for s in range(5)]
    for s in range(1, 5):
        a.report(s, 1.0 / s)
        b.report(s, 1.0 / s)
    assert a.center == b.center and a.spread == b.spread


@pytest.mark.parametrize(
    "bad, field",
    [({"population": 2}, "population"), ({"spread": 1.0}, "spread"), ({"center": {"lr": -1.0}}, "center")],
)
def test_generation_search_rejects_bad_settings(bad, field):
    args = {"center": {"lr": 0.1}} | bad
    with pytest.raises(ValueError, match=field):
        GenerationSearch(**args)
