"""`hdet run SPEC` (and `python -m hdet_ray run SPEC`, the entrypoint of `ray job submit` and KubeRay).

    hdet run examples/specs/digits.yaml
    hdet run --spec-json '{"task": "digits", "replicas": 2, "steps": 100, "sync_every": 25}'
    RAY_ADDRESS=http://head:8265 hdet run spec.yaml     # on an existing cluster

Exit status: 0 done, 2 invalid spec (nothing started), 1 the run failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hdet_ray.spec import JobSpec, SpecError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", nargs="?", help="job spec file (YAML or JSON)")
    parser.add_argument("--spec-json", help="the job spec as a JSON string (instead of a file)")
    parser.add_argument("--name", help="job name (default: the spec's, or a generated id)")
    parser.add_argument("--storage-path", help="where runs are written (default: the spec's, or ./runs)")
    parser.add_argument("--quiet", action="store_true", help="no per-window progress lines")


def load_spec(args: argparse.Namespace) -> JobSpec:
    if (args.spec is None) == (args.spec_json is None):
        raise SpecError("give exactly one of SPEC (a file) or --spec-json")
    spec = JobSpec.from_file(args.spec) if args.spec else JobSpec.from_text(args.spec_json, "--spec-json")
    if args.name:
        spec = JobSpec.parse({**spec.model_dump(mode="json"), "name": args.name}, "--name")
    return spec


def main(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args)
        from hdet_ray.ray.job import check_runnable

        check_runnable(spec)
    except SpecError as e:
        print(f"hdet run: {e}", file=sys.stderr)
        return 2
    from hdet_ray.ray.job import run_job

    print(
        f"hdet run: task {spec.task}, {spec.replicas} replicas, {spec.steps} steps, "
        f"sync every {spec.sync_period} ({spec.total_windows} windows)",
        flush=True,
    )
    try:
        result = run_job(spec, storage_path=args.storage_path, progress=not args.quiet)
    except Exception as e:
        from hdet_ray.ray.job import failure_reason

        # One line, which the service shows as the job's message: the cause, not Ray's wrapper.
        print(f"hdet run: the run failed: {failure_reason(e)}", file=sys.stderr, flush=True)
        return 1
    print(format_summary(result.summary))
    return 0


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        (
            f"done: {summary['name']}  ({summary['windows']} windows, {summary['wall_s']:.1f} s, "
            f"{summary['worker_seconds']:.0f} worker-seconds)"
        )
    ]
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in summary["final_metrics"].items() if v is not None)
    lines.append(f"final: {metrics}")
    trajectory = summary["base_trajectory"]
    names = [k for k in (trajectory[0] if trajectory else {}) if k not in ("window", "step")]
    for name in names:
        values = [t[name] for t in trajectory]
        shown = values if len(values) <= 8 else [*values[:4], None, *values[-3:]]
        lines.append(f"base {name}: " + " -> ".join("..." if v is None else f"{v:.3g}" for v in shown))
    restores = summary["actor"]["restores"]
    if restores:
        lines.append("restarts: resumed at window " + ", ".join(str(r["window"]) for r in restores))
    paths = summary["paths"]
    lines.append(f"files: {paths['run_dir']}/ (trajectory.jsonl, summary.json, spec.json)")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="hdet run")
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
