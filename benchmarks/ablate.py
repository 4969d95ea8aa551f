"""Ablate: the quality and held-out benchmarks' HDET cells under other controller settings, side by side with
the runs of the defaults that ship.

    python -m benchmarks.ablate 'no-climb={"controller_settings": {"climb_when_stalled": false}}' \
        --cells mlp/long/low cnn/long/oracle
    python -m benchmarks.ablate default --cells lm_sgd/high --seeds 0 1 2 --trace
    python -m benchmarks.ablate default --fixed --cells mlp/long/oracle --seeds 5 6 7 8 9
    python -m benchmarks.ablate --perturbed 2 --cells unseen/resnet/oracle --seeds 0 1 2 3 4

A variant is `name=JSON`, the `HDETOneCycleLR` keyword options to change (`controller_settings` for the
default controller's config; `explore` as a list of `HyperParam` field dicts; `health` as a dict of
`HealthConfig` fields; `sync_every` replaces the cell's), or `default` (the tree's
defaults, which differ from the stored runs only when the engine changed since they were made).
A cell is `workload/horizon/start` for the quality benchmark (`benchmarks.quality`: horizon short or
long), `workload/start` for a held-out workload (`benchmarks.holdout`), `issue/workload/start` for the
issue's setting (`benchmarks.issue_setting`: 500 steps, `sync_every=25`, its reference as the oracle) or
`unseen/workload/start` for `benchmarks.unseen`'s workloads (the same setting, its grid's best as the oracle);
start is low, oracle or high (10x too low, the oracle's rate, 10x too high, as the benchmarks fix them).
The oracle and the fixed OneCycle runs are read from those benchmarks' stored runs, so they must have run
first. Runs append to `--out` (an
interrupted run resumes); the table prints each cell's ratio to the oracle, mean over seeds, with the stored
default beside it. `--fixed` also runs fixed OneCycle at the cell's start on the given seeds, for seeds the
benchmark never ran (its oracle then stays the benchmark's: fresh seeds show how much of a cell's ratio is its
stored seeds' luck). `--perturbed K` also runs fixed OneCycle at the cell's start K more times per seed, each
with the initial weights changed in their sixth significant digit (`benchmarks.workloads.perturb_`, scale
`--perturb-scale`): the same run, so the spread of its results is the training's own chaos, and their mean is
fixed OneCycle's result without the luck of the draw that made its rate the oracle's. With
`--perturb-variants` each variant is run the same K perturbed times per seed instead of once (keys
`variant~1`, `variant~2`, ...), so that a variant and fixed OneCycle are compared draw for draw.
`--trace` also prints each run's window-by-window decisions: `+`/`-` the hypergradient's sign on a window
that held, `U`/`D` a move up/down, `R` a rollback, `x` a window that excluded a replica, `.`
no hypergradient, then the final centre multiplier.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import common, holdout, issue_setting, quality, unseen, workloads
from benchmarks.pool import read_results, run_jobs

STARTS = {"low": -2, "oracle": 0, "high": 2}
FIXED = "fixed-here"
"""The key and column of `--fixed`'s runs."""
PERTURBED = "fixed-perturbed"
"""The key prefix (then the perturbation's number) and column of `--perturbed`'s runs."""


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    if text == "default":
        return "default", {}
    name, sep, settings = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"variant must be 'default' or name=JSON, got {text!r}")
    try:
        parsed = json.loads(settings)
    except json.JSONDecodeError as e:
        raise SystemExit(f"variant {name!r}: settings are not JSON ({e})") from None
    if not isinstance(parsed, dict):
        raise SystemExit(f"variant {name!r}: settings must be a JSON object, got {settings!r}")
    return name, parsed


class Cell:
    """One benchmark cell: where its stored runs are, its oracle index and the job for a seed."""

    def __init__(self, text: str, replicas: int = quality.REPLICAS) -> None:
        parts = text.split("/")
        self.text = text
        self.issue = len(parts) == 3 and parts[0] == "issue" and parts[1] in issue_setting.ORACLE
        self.unseen = len(parts) == 3 and parts[0] == "unseen" and parts[1] in unseen.CENTRE
        if self.unseen:
            _, self.workload, start = parts
            self.horizon = None
            self.prefix = f"{self.workload}/"
            self.stored_file = common.results_dir("full") / "unseen_runs.jsonl"
            self.seeds_of_oracle = unseen.PLAN["full"]["seeds"]
        elif self.issue:
            _, self.workload, start = parts
            self.horizon = None
            self.prefix = f"{self.workload}/"
            self.stored_file = (
                common.results_dir("full") / f"{issue_setting.results_name(replicas)}_runs.jsonl"
            )
            self.seeds_of_oracle = issue_setting.PLAN["full"]["seeds"]
        elif len(parts) == 3 and parts[0] in quality.CENTRE and parts[1] in quality.HORIZONS["full"]:
            self.workload, self.horizon, start = parts
            self.prefix = f"{self.workload}/{self.horizon}/"
            self.stored_file = common.results_dir("full") / "quality_runs.jsonl"
            self.seeds_of_oracle = quality.SEEDS["full"]
        elif len(parts) == 2 and parts[0] in holdout.CENTRE:
            self.workload, start = parts
            self.horizon = None
            self.prefix = f"{self.workload}/"
            self.stored_file = common.results_dir("full") / "holdout_runs.jsonl"
            self.seeds_of_oracle = holdout.PLAN["full"]["seeds"]
        else:
            raise SystemExit(
                f"cell must be workload/horizon/start ({sorted(quality.CENTRE)}, short|long), "
                f"workload/start ({sorted(holdout.CENTRE)}), issue/workload/start "
                f"({sorted(issue_setting.ORACLE)}) or unseen/workload/start ({sorted(unseen.CENTRE)}), "
                f"start one of {sorted(STARTS)}; got {text!r}"
            )
        if start not in STARTS:
            raise SystemExit(f"cell {text!r}: start must be one of {sorted(STARTS)}")
        if replicas != quality.REPLICAS:
            if not self.issue:
                raise SystemExit(
                    f"cell {text!r}: --replicas other than {quality.REPLICAS} takes issue/ cells only"
                )
            self.text = f"{text}@n{replicas}"
        self.stored = read_results(self.stored_file)
        try:
            if self.issue:
                self.best = issue_setting.ORACLE[self.workload]
            elif self.horizon is not None:
                self.best = quality.oracle_index(
                    self.stored, self.workload, self.horizon, self.seeds_of_oracle
                )
            elif self.unseen:
                self.best, _ = unseen.grid_best(self.stored, self.workload, self.seeds_of_oracle)
            else:
                self.best = holdout.oracle_index(self.stored, self.workload, self.seeds_of_oracle)
        except KeyError:
            raise SystemExit(
                f"cell {text!r}: the benchmark's oracle grid is not in {self.stored_file}"
            ) from None
        self.k = self.best + STARTS[start]

    def oracle(self, seeds: list[int]) -> float:
        """The oracle's final metric, mean over `seeds`; over the benchmark's stored seeds where `seeds` has
        none of them (fresh seeds: the oracle stays the one the benchmark reports)."""
        key = f"{self.prefix}{{}}/fixed/{self.best}"
        known = [s for s in seeds if key.format(s) in self.stored]
        if not known:
            known = [s for s in self.seeds_of_oracle if key.format(s) in self.stored]
        # the issue setting's reference: the best of fixed OneCycle at k* and one grid step either side
        ks = (self.best - 1, self.best, self.best + 1) if self.issue else (self.best,)
        return min(
            statistics.mean(common.final_metric(self.stored, f"{self.prefix}{s}/fixed/{k}") for s in known)
            for k in ks
        )

    def job(self, seed: int, variant: str, settings: dict[str, Any], arm: str = "hdet") -> dict[str, Any]:
        if self.unseen:
            out = unseen.job("full", self.workload, seed, arm, self.k)
        elif self.issue:
            out = issue_setting.job("full", self.workload, seed, arm, self.k)
        elif self.horizon is not None:
            out = quality.job(self.workload, self.horizon, "full", seed, arm, self.k)
        else:
            out = holdout.job("full", self.workload, seed, arm, self.k)
        out["key"] = f"{self.text}/{seed}/{variant}"
        if arm == "hdet":
            if "job" in settings:  # job-level fields (`{"job": {"ddp": true}}`), not HDET options
                out.update(settings["job"])
                settings = {k: v for k, v in settings.items() if k != "job"}
            out["hdet"] = settings
        return out

    def stored_key(self, seed: int, arm: str) -> str:
        return f"{self.prefix}{seed}/{arm}/{self.k}"


def trace(run: dict[str, Any]) -> str:
    marks = []
    for r in run.get("records", []):
        if r.get("rollback"):
            marks.append("R")
            continue
        p = r["params"]["lr"]
        moved = p["new_offset"] - p["offset"]
        h = p.get("signal")
        h = math.nan if h is None else h
        if abs(moved) > 1e-12:
            mark = "U" if moved > 0 else "D"
        elif r.get("excluded"):
            mark = "x"
        else:
            mark = "." if not math.isfinite(h) else ("+" if h > 0 else "-")
        marks.append(mark)
    centres = run.get("centres") or [math.nan]
    return f"{''.join(marks)} {centres[-1]:.2f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ablate", description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="'default' or name=JSON HDET options")
    parser.add_argument(
        "--cells",
        nargs="+",
        required=True,
        help="workload/horizon/start, workload/start, issue/workload/start or unseen/workload/start",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=common.RESULTS / "ablate" / "ablate_runs.jsonl")
    parser.add_argument("--trace", action="store_true", help="print each run's window-by-window decisions")
    parser.add_argument(
        "--replicas", type=int, default=quality.REPLICAS, help="gloo processes for issue/ cells (default 4)"
    )
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="also run fixed OneCycle at the cell's start on these seeds (for seeds the benchmark never ran)",
    )
    parser.add_argument(
        "--perturbed",
        type=int,
        default=0,
        metavar="K",
        help="also run fixed OneCycle at the cell's start K times per seed with perturbed initial weights",
    )
    parser.add_argument(
        "--perturb-variants",
        action="store_true",
        help="run each variant as --perturbed's K perturbed draws per seed instead of once",
    )
    parser.add_argument(
        "--perturb-scale",
        type=float,
        default=1e-6,
        help="--perturbed's relative change of each initial weight (default 1e-6)",
    )
    parser.add_argument(
        "--job",
        type=json.loads,
        default={},
        metavar="JSON",
        help="job-level fields for every run of this invocation, fixed ones too (e.g. '{\"clip\": 1.0}': "
        "the user's gradient clip)",
    )
    args = parser.parse_args(argv)
    if not isinstance(args.job, dict):
        parser.error(f"--job must be a JSON object, got {args.job!r}")
    variants = dict(parse_variant(v) for v in args.variants)
    if args.replicas < 2:
        parser.error(f"--replicas must be 2 or more, got {args.replicas}")
    if args.perturbed < 0:
        parser.error(f"--perturbed must be >= 0, got {args.perturbed}")
    if not 0.0 < args.perturb_scale < 1.0:
        parser.error(f"--perturb-scale must be in (0, 1), got {args.perturb_scale}")
    if not (variants or args.fixed or args.perturbed):
        parser.error("nothing to run: give a variant, --fixed or --perturbed")
    if args.perturb_variants and not (args.perturbed and variants):
        parser.error("--perturb-variants needs --perturbed K and at least one variant")
    cells = [Cell(c, args.replicas) for c in args.cells]
    draws = range(1, args.perturbed + 1) if args.perturb_variants else ()
    # per variant, its runs at each seed, name -> perturbed draw: one run (no draw), or one per draw
    draws_of: dict[str, dict[str, int | None]] = {
        name: {f"{name}~{p}": p for p in draws} or {name: None} for name in variants
    }
    runs_of = {name: list(runs) for name, runs in draws_of.items()}
    jobs = [
        c.job(s, name, v)
        | ({} if draw is None else {"perturb": args.perturb_scale, "perturb_seed": draw})
        | {"key": f"{c.text}/{s}/{run}"}
        for c in cells
        for name, v in variants.items()
        for s in args.seeds
        for run, draw in draws_of[name].items()
    ]
    if args.fixed:
        jobs += [c.job(s, FIXED, {}, arm="fixed") for c in cells for s in args.seeds]
    perturbed = [f"{PERTURBED}{p}" for p in range(1, args.perturbed + 1)]
    jobs += [
        {**c.job(s, name, {}, arm="fixed"), "perturb": args.perturb_scale, "perturb_seed": p}
        for c in cells
        for s in args.seeds
        for p, name in enumerate(perturbed, 1)
    ]
    jobs = [job | args.job for job in jobs]
    print(f"[ablate] {len(jobs)} runs (those already in {args.out} are skipped)", flush=True)
    run_jobs(workloads.run, jobs, args.replicas, args.out)
    runs = read_results(args.out)
    rows = []
    for c in cells:
        oracle = c.oracle(args.seeds)

        row = [c.text]
        for arm in ("fixed", "hdet"):
            keys = [c.stored_key(s, arm) for s in args.seeds]
            row.append(_fmt(c.stored, keys, oracle) if all(k in c.stored for k in keys) else "-")
        for names in [*runs_of.values(), *([[FIXED]] if args.fixed else [])]:
            row.append(_fmt_seeds(_per_seed(runs, c, args.seeds, names), oracle))
        if args.fixed:

            def mean_of(names: list[str], c: Cell = c) -> float:
                return statistics.mean(_per_seed(runs, c, args.seeds, names))

            row += [f"{mean_of(n) / mean_of([FIXED]):.3f}" for n in runs_of.values()]
        if perturbed:
            row += _perturbed_columns(c, runs, args.seeds, perturbed, oracle, list(runs_of.values()))
        rows.append(row)
        if args.trace:
            for names in runs_of.values():
                for s in args.seeds:
                    for name in names:
                        print(f"  {c.text} {name} seed {s}: {trace(runs[f'{c.text}/{s}/{name}'])}")
    heads = ["cell", "fixed (stored)", "HDET default (stored)", *variants]
    if args.fixed:
        heads += [FIXED, *(f"{n} / {FIXED}" for n in variants)]
    if perturbed:
        heads += [
            PERTURBED,
            f"{PERTURBED} range",
            f"HDET default (stored) / {PERTURBED}",
            *(f"{n} / {PERTURBED}" for n in variants),
        ]
    print(
        common.table(heads, rows)
        + f"\nratio to the oracle, mean over seeds {args.seeds} (per seed in brackets)"
        + (
            f"; '{FIXED}': fixed OneCycle run here on these seeds, and each variant's mean final metric "
            "over its mean"
            if args.fixed
            else ""
        )
        + (
            f"; '{PERTURBED}': fixed OneCycle at the cell's start, initial weights changed by "
            f"{args.perturb_scale:g} relative, {args.perturbed} draws per seed (mean per seed in brackets; "
            "range: the lowest and highest single run), and the stored HDET default's and each variant's "
            "mean final metric over its mean"
            if perturbed
            else ""
        )
        + "\nreproduce: python -m benchmarks.ablate "
        + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    )
    return 0


def _per_seed(runs: dict[str, dict[str, Any]], c: Cell, seeds: list[int], names: list[str]) -> list[float]:
    """Per seed, the mean final metric of the cell's runs `names` (one run or a variant's perturbed draws)."""
    return [statistics.mean(common.final_metric(runs, f"{c.text}/{s}/{n}") for n in names) for s in seeds]


def _perturbed_columns(
    c: Cell,
    runs: dict[str, dict[str, Any]],
    seeds: list[int],
    perturbed: list[str],
    oracle: float,
    variants: list[list[str]],
) -> list[str]:
    """`--perturbed`'s columns for one cell: its runs' ratio to the oracle (mean per seed, then over seeds),
    the lowest and highest single run, and the stored HDET default's and each variant's mean final metric
    over theirs (`variants`: each variant's run names at a seed)."""
    per_seed = _per_seed(runs, c, seeds, perturbed)
    every = [common.final_metric(runs, f"{c.text}/{s}/{n}") for s in seeds for n in perturbed]
    base = statistics.mean(per_seed)
    stored = [c.stored_key(s, "hdet") for s in seeds]
    return [
        _fmt_seeds(per_seed, oracle),
        f"{min(every) / oracle:.2f}-{max(every) / oracle:.2f}",
        (
            f"{statistics.mean(common.final_metric(c.stored, k) for k in stored) / base:.3f}"
            if all(k in c.stored for k in stored)
            else "-"
        ),
        *(f"{statistics.mean(_per_seed(runs, c, seeds, names)) / base:.3f}" for names in variants),
    ]


def _fmt(results: dict[str, dict[str, Any]], keys: list[str], oracle: float) -> str:
    return _fmt_seeds([common.final_metric(results, k) for k in keys], oracle)


def _fmt_seeds(values: list[float], oracle: float) -> str:
    ratios = [x / oracle for x in values]
    return f"{statistics.mean(ratios):.3f} (" + " ".join(f"{x:.2f}" for x in ratios) + ")"


if __name__ == "__main__":
    sys.exit(main())
