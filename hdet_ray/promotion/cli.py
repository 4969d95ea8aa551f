"""`hdet promote STUDY.yaml`: run a staged-promotion study on Ray, or resume it from its record.

    hdet promote examples/studies/digits.yaml                 # local Ray (or RAY_ADDRESS)
    hdet promote examples/studies/digits.yaml --out runs/studies --concurrency 2
    hdet promote --study-json '{"name": ..., ...}' --out runs/studies   # the service's Ray job entrypoint

The record lands in OUT/<study name>/ (record.json, record.md, record.png). Run the same command again
after an interruption: finished cells are not re-run. A study whose file changed after it was frozen is
refused (exit status 2) with the changed fields named.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from hdet_ray.promotion.freeze import StudyChanged
from hdet_ray.promotion.protocol import Study, StudyError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", nargs="?", help="the study definition (YAML or JSON file)")
    parser.add_argument(
        "--study-json", default=None, help="the study definition inline, as JSON (instead of a file)"
    )
    parser.add_argument(
        "--out", default="runs/studies", help="where records are written (default: %(default)s)"
    )
    parser.add_argument(
        "--address", default=None, help="Ray address (default: RAY_ADDRESS, else a local Ray)"
    )
    parser.add_argument(
        "--num-cpus", type=int, default=None, help="CPUs of the local Ray started for the study"
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="cells at a time (default: the cluster's CPUs)"
    )
    parser.add_argument(
        "--executor",
        choices=["inprocess", "run_job"],
        default="inprocess",
        help="inprocess: one-replica cells as Ray tasks; run_job: each cell a full job",
    )


def main(args: argparse.Namespace) -> int:
    from hdet_ray.promotion.cells import validate_cells
    from hdet_ray.promotion.executors import EXECUTORS
    from hdet_ray.promotion.record import StudyRecord

    executor = EXECUTORS[args.executor]()
    try:
        study = _load(args)
        validate_cells(study, executor.max_replicas)
        StudyRecord.open(args.out, study)  # refuses a changed study before Ray starts
    except (StudyError, StudyChanged) as e:
        print(f"hdet promote: {e}", file=sys.stderr)
        return 2
    if args.concurrency is not None and args.concurrency < 1:
        print("hdet promote: --concurrency must be >= 1", file=sys.stderr)
        return 2

    import ray

    from hdet_ray.promotion.runner import run_study

    address = args.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(
            num_cpus=args.num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            _temp_dir=tempfile.mkdtemp(prefix="hdet-promote-"),
        )
    try:
        record = run_study(study, args.out, executor=executor, concurrency=args.concurrency)
    except (StudyError, StudyChanged) as e:
        print(f"hdet promote: {e}", file=sys.stderr)
        return 2
    finally:
        ray.shutdown()
    winner = record.decisions.get(study.stages[-1].name, {}).get("winner")
    print(
        f"study {study.name}: finished; winner {winner}; "
        f"{record.data['budget']['spent_hours']:.4f} worker-hours; record in {record.path}"
    )
    return 0


def _load(args: argparse.Namespace) -> Study:
    if (args.study is None) == (args.study_json is None):
        raise StudyError("give the study as a file (STUDY) or inline (--study-json), exactly one of them")
    if args.study is not None:
        return Study.from_file(args.study)
    try:
        data = json.loads(args.study_json)
    except ValueError as e:
        raise StudyError(f"--study-json: not valid JSON: {e}") from None
    return Study.parse(data, "--study-json")
