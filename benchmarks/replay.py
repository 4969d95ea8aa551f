"""Replay the controller on stored runs' windows: which runs would other controller settings change?

    python -m benchmarks.replay '{"fit_floor": null}'                   # every stored HDET run
    python -m benchmarks.replay '{"down_stall_ratio": 0.75}' --results path/to/runs.jsonl
    python -m benchmarks.replay --stuck '{"replica_learned": false}'      # health's stuck rule instead

An HDET run stores what the controller read at every sync (`WindowRecord.to_dict()`: the replicas' losses and
health, the multipliers, the base, the hypergradient). Fed back through the controller with the shipped
settings, those windows reproduce every recorded decision; with other settings, the first window whose
decision differs is where the run would have gone elsewhere. So this lists the runs a change of a controller
default must re-run (every other run repeats its stored result to the last digit) and the seeds a side-by-side
`benchmarks.ablate` of it needs. A run whose recorded decisions the shipped settings do not reproduce (made by
an older engine) is counted as stale and skipped. It replays the controller only: a change to the spread
or the engine is not seen here, nor a change to the health checks, except with `--stuck`: then the settings
are `HealthConfig` fields and what is replayed is the stuck rule (`core.health.stuck`), which reads the
replicas' window means that the records keep (the other health rules read each replica's tail and lowest
batch loss, which they do not), with the health memory rebuilt from the recorded verdicts.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from hdet_ray.core.controller import DEFAULT_CONTROLLER, ParamWindow, Window, make_controller
from hdet_ray.core.health import HealthConfig, ReplicaStats, stuck
from hdet_ray.core.hyperparams import HyperParam
from hdet_ray.core.records import WindowRecord
from hdet_ray.engine.state import HealthMemory

Decision = tuple[float, bool]  # the offset after the decision, and whether it rolled back
# the limits of the controller's offset that the engine passes it (`HyperParam.offset_bounds`): every stored
# run explores the rate with the default's, and a record does not keep them
OFFSET_BOUNDS = HyperParam(name="lr").offset_bounds


@dataclass(frozen=True)
class Change:
    results: str
    key: str
    window: int
    before: Decision
    after: Decision
    metric: float


def windows(row: Mapping[str, Any], param: str = "lr") -> Iterator[Window]:
    """The windows the controller read during the run, rebuilt from its records."""
    records = [WindowRecord.from_dict(r) for r in row["records"]]
    peak = max(r.params[param].base for r in records)  # OneCycle's peak: the largest base of the run
    # the schedule's base at the next window's end is the next record's (the schedule does not depend on the
    # run's decisions); the last window has none, which the controller only reads in the run's first window
    following = [r.params[param].base for r in records[1:]] + [math.nan]
    for r, next_base in zip(records, following, strict=True):
        p = r.params[param]
        yield Window(
            window=r.window,
            step=r.step,
            total_steps=r.total_steps,
            losses=tuple(r.losses),
            healthy=tuple(r.healthy),
            params={
                param: ParamWindow(
                    scale="log",
                    base=p.base,
                    offset=p.offset,
                    coords=tuple(math.log(m) for m in p.multipliers),
                    values=tuple(p.values),
                    peak=peak,
                    next_base=next_base,
                    offset_bounds=OFFSET_BOUNDS,
                )
            },
            opening=r.opening,
            hypergradient=math.nan if p.signal is None else p.signal,
            initial_loss=records[0].start_loss,
            restart=r.restarted,
        )


def recorded(row: Mapping[str, Any], param: str = "lr") -> list[Decision]:
    return [(round(r["params"][param]["new_offset"], 9), bool(r["rollback"])) for r in row["records"]]


def replayed(row: Mapping[str, Any], settings: Mapping[str, Any], param: str = "lr") -> list[Decision]:
    controller = make_controller(DEFAULT_CONTROLLER, **settings)
    state = controller.initial_state([param])
    out = []
    for window in windows(row, param):
        state, decision = controller.decide(state, window)
        out.append((round(decision.offsets[param], 9), decision.rollback))
    return out


def recorded_stuck(row: Mapping[str, Any]) -> list[bool]:
    """Per window, whether the run recorded it as stuck (every replica failed for that reason)."""
    return [
        bool(r["reasons"]) and all(v.startswith("stuck") for v in r["reasons"].values())
        for r in row["records"]
    ]


def replica_stats(record: WindowRecord) -> list[ReplicaStats]:
    """What the health checks judged each replica on, as far as the record keeps it: records written since
    2026-12-06 keep each replica's first, tail and lowest loss and its count, so `assess` replays on them
    (the batches' draw, `blowup_noise`, included); older ones keep the window means only, and every replica
    gets the window's start as its first loss (no draw: that floor reads as off) and its mean as its tail."""
    n = len(record.losses)
    lists = (record.first_losses, record.tail_losses, record.min_losses, record.counts)
    if all(len(x) == n for x in lists):
        firsts, tails, lows, counts = lists
    else:
        firsts, tails, lows, counts = [record.start_loss] * n, record.losses, record.losses, [1] * n
    return [
        ReplicaStats(mean_loss=x, first_loss=f, tail_loss=t, min_loss=lo, params_finite=True, count=c)
        for x, f, t, lo, c in zip(record.losses, firsts, tails, lows, counts, strict=True)
    ]


def replayed_stuck(row: Mapping[str, Any], config: HealthConfig) -> list[bool]:
    """Per window, whether the stuck rule acts under `config` (it fails every replica), on windows every other
    rule passed; its count of windows in a row (`stuck_windows`) kept as the engine keeps it."""
    records = [WindowRecord.from_dict(r) for r in row["records"]]
    memory = HealthMemory(initial_loss=records[0].start_loss)
    out, run = [], 0
    for r, was_stuck in zip(records, recorded_stuck(row), strict=True):
        met = False
        if all(r.healthy) or was_stuck:
            stats = replica_stats(r)
            m = memory
            memory_of = (m.previous_loss, m.best_loss, m.initial_loss, m.best_replica, m.blown, m.best_clear)
            met = stuck(stats, config, *memory_of) is not None
        acted = met and run + 1 >= config.stuck_windows
        run = run + 1 if met and not acted else 0
        out.append(acted)
        memory.note_blowups(r.reasons.values())
        memory.note_rise(r.losses, config)
        memory.remember(r.losses, r.healthy, r.rollback, restored=r.rollback)  # a snapshot is held by default
    return out


def hdet_runs(path: Path, arm: str = "hdet", param: str = "lr") -> Iterator[dict[str, Any]]:
    """The runs of one arm (a segment of the benchmarks' keys; `hdet`: the shipped default) with records."""
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            records = row.get("records")
            if arm in row["key"].split("/") and records and set(records[0]["params"]) == {param}:
                yield row


def replay(
    paths: Sequence[Path], settings: Mapping[str, Any], arm: str = "hdet"
) -> tuple[list[Change], int, int]:
    """(the runs the settings change, at their first differing window; runs replayed; stale runs skipped)."""
    changes, total, stale = [], 0, 0
    for path in paths:
        for row in hdet_runs(path, arm):
            total += 1
            before = recorded(row)
            if replayed(row, {}) != before:
                stale += 1
                continue
            after = replayed(row, settings)
            if after != before:
                i = next(i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b)
                changes.append(
                    Change(path.name, row["key"], i, before[i], after[i], row.get("metric", math.nan))
                )
    return changes, total, stale


def replay_stuck(
    paths: Sequence[Path], settings: Mapping[str, Any], arm: str = "hdet"
) -> tuple[list[Change], int, int]:
    """`replay` for the health checks' stuck rule: a Change's before/after are (stuck, rolled back)."""
    shipped, config = HealthConfig(), HealthConfig(**settings)
    changes, total, stale = [], 0, 0
    for path in paths:
        for row in hdet_runs(path, arm):
            total += 1
            before = recorded_stuck(row)
            if replayed_stuck(row, shipped) != before:
                stale += 1
                continue
            after = replayed_stuck(row, config)
            if after != before:
                i = next(i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b)
                rolled = bool(row["records"][i]["rollback"])
                changes.append(
                    Change(
                        path.name,
                        row["key"],
                        i,
                        (float(before[i]), rolled),
                        (float(after[i]), after[i]),
                        row.get("metric", math.nan),
                    )
                )
    return changes, total, stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", help="controller settings as JSON, e.g. '{\"fit_floor\": null}'")
    parser.add_argument(
        "--results",
        nargs="+",
        type=Path,
        help="JSON lines files of runs (default: every stored benchmark's)",
    )
    parser.add_argument("--arm", default="hdet", help="the runs whose key has this segment (default: hdet)")
    parser.add_argument(
        "--stuck",
        action="store_true",
        help="the settings are HealthConfig fields; replay the health checks' stuck rule",
    )
    args = parser.parse_args(argv)
    paths = args.results or sorted(common.results_dir("full").glob("*_runs.jsonl"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"--results: no such file(s): {', '.join(missing)}")
    try:
        settings = json.loads(args.settings)
    except json.JSONDecodeError as e:
        parser.error(f"settings: not JSON ({e})")
    kind = "HealthConfig fields" if args.stuck else "controller settings"
    if not isinstance(settings, dict):
        parser.error(f"settings: expected a JSON object of {kind}")
    try:
        HealthConfig(**settings) if args.stuck else make_controller(DEFAULT_CONTROLLER, **settings)
    except (TypeError, ValueError) as e:
        parser.error(f"settings: {e}")
    if args.stuck:
        changes, total, stale = replay_stuck(paths, settings, args.arm)
        rows = [
            (c.results, c.key, c.window, bool(c.before[0]), bool(c.after[0]), f"{c.metric:.4g}")
            for c in changes
        ]
        header = ["results", "run", "first window", "stuck recorded", "replayed", "metric"]
    else:
        changes, total, stale = replay(paths, settings, args.arm)
        rows = [
            (c.results, c.key, c.window, f"{c.before[0]:+.3f}", f"{c.after[0]:+.3f}", f"{c.metric:.4g}")
            for c in changes
        ]
        header = ["results", "run", "first window", "offset recorded", "replayed", "metric"]
    print(common.table(header, rows))
    print(f"\n{len(changes)} of {total - stale} runs change ({stale} skipped: made by an older engine)")
    given = list(sys.argv[1:] if argv is None else argv)
    print(f"reproduce: python -m benchmarks.replay {shlex.join(given)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
