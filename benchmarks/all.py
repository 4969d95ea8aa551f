"""Run every CPU benchmark, then assemble the page.

    python -m benchmarks.all --quick    # under 15 minutes on 2 shared cores;
                                        # results in benchmarks/results/quick/
    python -m benchmarks.all            # the full set (hours on 2 cores), then docs/benchmarks.md

The GPU check is not part of it (`python -m benchmarks.gpu_check` on a machine with a CUDA GPU).
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks import common, docs, holdout, horizon, issue_setting, quality, scale, speed, unseen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.all", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    started = time.perf_counter()
    # timing benchmarks first, before the long quality runs heat the machine's queue
    for name, bench in (("scale", scale), ("speed", speed), ("quality", quality), ("holdout", holdout),
                        ("horizon", horizon), ("issue_setting", issue_setting),
                        ("unseen", unseen)):  # fmt: skip
        t = time.perf_counter()
        bench.run(mode)
        print(f"[all] {name} done in {time.perf_counter() - t:.0f} s", flush=True)
    path = docs.assemble(mode)
    print(f"[all] {mode} mode done in {time.perf_counter() - started:.0f} s; page: {path}")
    return 0


if __name__ == "__main__":
    common.results_dir("quick")
    sys.exit(main())
