"""The `hdet` command. Each subcommand lives in the module that owns it and is imported only when used,
so `hdet run` needs no FastAPI and `import hdet_ray` needs no Ray.

    hdet run SPEC        run a job on Ray (RAY_ADDRESS, or a local Ray started for the run)
    hdet submit SPEC     submit a job to a Ray cluster with the Ray Jobs API
    hdet serve           start the REST service and dashboard
    hdet demo            quickstart: service + embedded Ray + a demo job, prints the dashboard URL
    hdet promote STUDY   run a staged-promotion study
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, help). The module defines add_arguments(parser) and main(args) -> int.
SUBCOMMANDS = {
    "run": ("hdet_ray.ray.entry", "run an HDET job spec on Ray"),
    "submit": ("hdet_ray.ray.submit", "submit a job spec to a Ray cluster (ray job submit)"),
    "serve": ("service.cli", "start the REST service and dashboard"),
    "demo": ("service.demo", "start the service with embedded Ray and run a demo job"),
    "promote": ("hdet_ray.promotion.cli", "run a staged-promotion study"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="hdet", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.print_help() if (not argv or argv[0] in ("-h", "--help")) else parser.parse_args(argv)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    name = argv[0]
    module = importlib.import_module(SUBCOMMANDS[name][0])
    cmd = argparse.ArgumentParser(prog=f"hdet {name}", description=SUBCOMMANDS[name][1])
    module.add_arguments(cmd)
    return int(module.main(cmd.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
