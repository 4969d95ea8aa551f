"""Assemble docs/benchmarks.md from benchmarks/page.md and the results' Markdown tables.

    python -m benchmarks.docs           # from benchmarks/results/full (and results/gpu, if measured)
    python -m benchmarks.docs --quick   # into benchmarks/results/quick/benchmarks.md instead

`page.md` holds the prose; `{{name}}` is replaced by `results/<mode>/<name>.md` (or a "not measured" line).
The README's summary table, between its two `unseen summary` comments, is written from
`results/full/unseen_summary.md` too (`python -m benchmarks.unseen --report-only` rebuilds that).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from benchmarks import common

PAGE = Path(__file__).with_name("page.md")
README = common.ROOT / "README.md"
SUMMARY_OPEN = "<!-- unseen summary: python -m benchmarks.docs writes it from unseen_summary.md -->"
SUMMARY_CLOSE = "<!-- end of unseen summary -->"


def readme_with_summary(readme: str, summary: str) -> str:
    """`readme` with the table of `summary` (unseen_summary.md: a line that says how it is computed, then the
    table) between the summary's two comments; ValueError naming the comment when one is missing."""
    for marker in (SUMMARY_OPEN, SUMMARY_CLOSE):
        if readme.count(marker) != 1:
            raise ValueError(f"README.md must hold the line {marker!r} once")
    table = "\n".join(line for line in summary.splitlines() if line.startswith("|"))
    head, rest = readme.split(SUMMARY_OPEN)
    _, tail = rest.split(SUMMARY_CLOSE)
    return f"{head}{SUMMARY_OPEN}\n\n{table}\n\n{SUMMARY_CLOSE}{tail}"  # blank lines: a table, not HTML


def assemble(mode: str = "full") -> Path:
    out = common.results_dir(mode)

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        path = (common.RESULTS / "gpu" if name == "gpu_check" else out) / f"{name}.md"
        if path.exists():
            return path.read_text().strip()
        return f"*Not measured: no `{path.relative_to(common.ROOT)}` (run `python -m benchmarks.{name}`).*"

    text = re.sub(r"\{\{(\w+)\}\}", fill, PAGE.read_text())
    if mode != "full":
        text = (
            "> **Quick mode**: 1 seed and short runs, to check that every script works; the prose below was "
            "written for the full run's numbers (docs/benchmarks.md) and need not match these.\n\n" + text
        )
    target = common.ROOT / "docs" / "benchmarks.md" if mode == "full" else out / "benchmarks.md"
    target.write_text(text)
    summary = out / "unseen_summary.md"
    if mode == "full" and summary.exists():
        README.write_text(readme_with_summary(README.read_text(), summary.read_text()))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(assemble("quick" if args.quick else "full"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
