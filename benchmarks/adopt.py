"""Adopt: move a variant's runs, made by `benchmarks.ablate`, into the stored benchmark results under the keys
of the runs they replace, for when that variant's settings become the default.

    python -m benchmarks.replay '{"high_start_runs_down": false}'   # which stored runs the change alters
    python -m benchmarks.ablate 'nodown={...}' --cells ... --seeds ... --out F   # re-make them
    python -m benchmarks.adopt F nodown                # the plan: which stored run each one replaces
    python -m benchmarks.adopt F nodown --write        # do it; `benchmarks.replay '{}'` then reads 0
    python -m benchmarks.adopt F rise --changed --write   # only the runs the new default changes

A run `<cell>/<seed>/<variant>` (`--replicas` cells carry `@n<R>`) replaces its cell's stored HDET run at that
seed (`ablate.Cell.stored_key`) where the benchmark stored one; a fresh seed replaces nothing there. `--side
FILE` (repeatable) also replaces the `default` arm of another ablate results file (`<cell>/<seed>/default`),
for the side-by-side files whose default arm is meant to be the shipped default's. With `--changed` (after the
default is changed in the code) a run replaces only a stored run whose recorded decisions today's controller
(or the health checks' stuck rule) no longer reproduces, so a run the change leaves alone keeps its stored
result (a re-made run of a chaotic cell can differ in its last digits on another machine). Only runs named in
the plan change; every other line of a file is written back as it was, in its order. A run's row does not
record the job-level fields of the `benchmarks.ablate` invocation that made it (`--job`, e.g. a user's clip),
so a side file made with them takes only runs made with the same ones: adopt those from their own results
file, and leave the side file out of the others' `--side` (its runs are keyed like the rest).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from benchmarks import quality
from benchmarks.ablate import Cell
from benchmarks.pool import read_results
from benchmarks.replay import recorded, recorded_stuck, replayed, replayed_stuck
from hdet_ray.core.health import HealthConfig


def parse_key(key: str) -> tuple[str, int, int, str]:
    """(cell, replicas, seed, variant) of an ablate run's key `<cell>[@n<R>]/<seed>/<variant>`."""
    cell, seed, variant = key.rsplit("/", 2)
    replicas = quality.REPLICAS
    if "@n" in cell:
        cell, n = cell.rsplit("@n", 1)
        replicas = int(n)
    return cell, replicas, int(seed), variant


def plan(source: Path, variant: str, side: list[Path] = ()) -> list[tuple[Path, str, str]]:
    """(file, key of the run replaced, key of the run that replaces it), for every run of `variant` in
    `source` that has a run to replace."""
    cells: dict[tuple[str, int], Cell] = {}
    sides = {path: read_results(path) for path in side}
    out = []
    for key in read_results(source):
        cell_text, replicas, seed, name = parse_key(key)
        if name != variant:
            continue
        cell = cells.get((cell_text, replicas)) or cells.setdefault(
            (cell_text, replicas), Cell(cell_text, replicas)
        )
        stored = cell.stored_key(seed, "hdet")
        if stored in cell.stored:
            out.append((cell.stored_file, stored, key))
        for path, runs in sides.items():
            default = f"{cell.text}/{seed}/default"
            if default in runs:
                out.append((path, default, key))
    return out


def changed(moves: list[tuple[Path, str, str]]) -> list[tuple[Path, str, str]]:
    """The moves whose replaced run today's engine no longer reproduces (its recorded decisions differ from a
    replay of its windows with the shipped controller settings, or its recorded stuck verdicts from the
    shipped health checks' stuck rule): after a change of a default, the runs it changes."""
    files: dict[Path, dict[str, Any]] = {}
    health = HealthConfig()
    out = []
    for path, old, new in moves:
        row = (files.get(path) or files.setdefault(path, read_results(path)))[old]
        if row.get("records") and (
            replayed(row, {}) != recorded(row) or replayed_stuck(row, health) != recorded_stuck(row)
        ):
            out.append((path, old, new))
    return out


def apply(moves: list[tuple[Path, str, str]], source: Path) -> None:
    """Rewrite each file of `moves` with its named runs replaced by the source's (renamed to their keys)."""
    runs = read_results(source)
    by_file: dict[Path, dict[str, str]] = {}
    for path, old, new in moves:
        by_file.setdefault(path, {})[old] = new
    for path, replace in by_file.items():
        lines = path.read_text().splitlines()
        written, seen = [], set()
        for line in lines:
            if not line.strip():
                continue
            row: dict[str, Any] = json.loads(line)
            if row["key"] in replace:
                seen.add(row["key"])
                row = {**runs[replace[row["key"]]], "key": row["key"]}
                line = json.dumps(row)
            written.append(line)
        missing = set(replace) - seen
        if missing:
            raise SystemExit(f"{path}: no run {sorted(missing)[0]!r} to replace")
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("\n".join(written) + "\n")
        os.replace(tmp, path)  # a crash leaves the old file or the new one, never half of it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a benchmarks.ablate results file")
    parser.add_argument("variant", help="the variant whose runs replace the stored ones")
    parser.add_argument(
        "--side", type=Path, action="append", default=[], help="also replace FILE's default arm"
    )
    parser.add_argument(
        "--changed",
        action="store_true",
        help="only replace stored runs whose decisions today's controller no longer reproduces",
    )
    parser.add_argument("--write", action="store_true", help="rewrite the files (default: print the plan)")
    args = parser.parse_args(argv)
    if not args.source.exists():
        parser.error(f"source: no file {args.source}")
    moves = plan(args.source, args.variant, args.side)
    if args.changed:
        moves = changed(moves)
    for path, old, new in moves:
        print(f"{path.name}: {old} <- {new}")
    print(f"{len(moves)} runs {'replaced' if args.write else 'to replace (--write to do it)'}")
    if args.write:
        apply(moves, args.source)


if __name__ == "__main__":
    main()
