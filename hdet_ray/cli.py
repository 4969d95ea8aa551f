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
import sys
from collections.abc import Callable
from types import ModuleType


def _run() -> ModuleType:
    from hdet_ray.ray import entry

    return entry


def _submit() -> ModuleType:
    from hdet_ray.ray import submit

    return submit


def _promote() -> ModuleType:
    from hdet_ray.promotion import cli

    return cli


def _serve() -> ModuleType:
    # The one place hdet_ray reaches the service package (installed beside it): when the user asks for it.
    from service import cli

    return cli


def _demo() -> ModuleType:
    from service import demo

    return demo


# name -> (loader, help). The loaded module defines add_arguments(parser) and main(args) -> int.
SUBCOMMANDS: dict[str, tuple[Callable[[], ModuleType], str]] = {
    "run": (_run, "run an HDET job spec on Ray"),
    "submit": (_submit, "submit a job spec to a Ray cluster (ray job submit)"),
    "serve": (_serve, "start the REST service and dashboard"),
    "demo": (_demo, "start the service with embedded Ray and run a demo job"),
    "promote": (_promote, "run a staged-promotion study"),
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
    module = SUBCOMMANDS[name][0]()
    cmd = argparse.ArgumentParser(prog=f"hdet {name}", description=SUBCOMMANDS[name][1])
    module.add_arguments(cmd)
    return int(module.main(cmd.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
