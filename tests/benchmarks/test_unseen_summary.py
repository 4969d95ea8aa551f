"""`benchmarks.unseen`'s summary over every workload, and the README table written from it."""

import math

import pytest

from benchmarks import common, docs, unseen
from benchmarks.pool import read_results


def _runs(workload: str, best: int, fixed: dict[int, list[float]], hdet: dict[int, list[float]]) -> dict:
    """Stored-run rows for one workload: the grid on the plan's seeds (the best at `best`, the others
    worse), and each arm's metric per start offset and seed."""
    results = {}
    for s in unseen.PLAN["full"]["seeds"]:
        for k in unseen.GRID:
            results[f"{workload}/{s}/fixed/{k}"] = {"metric": 1.0 if k == best else 2.0 + abs(k - best)}
    for arm, cells in (("fixed", fixed), ("hdet", hdet)):
        for d, metrics in cells.items():
            for s, m in enumerate(metrics):
                results[f"{workload}/{s}/{arm}/{best + d}"] = {"metric": m}
    return results


def test_the_summary_counts_each_start_over_the_workloads():
    # two workloads, three seeds each; the oracle's fixed runs end at 1.0 (their grid's best)
    good = _runs(
        "regression",
        3,
        fixed={-2: [3.0, 3.0, 3.0], 0: [1.0, 1.0, 1.0], 2: [math.inf, 9.0, 9.0]},
        hdet={-2: [1.05, 1.05, 1.05], 0: [1.0, 1.0, 1.0], 2: [1.2, 1.2, 1.2]},
    )
    poor = _runs(
        "gru",
        3,
        fixed={-2: [1.5, 1.5, 1.5], 0: [1.0, 1.0, 1.0], 2: [2.0, 2.0, 2.0]},
        hdet={-2: [1.6, 1.6, 1.6], 0: [1.2, 1.2, 1.2], 2: [math.inf, 1.0, 1.0]},
    )
    rows = {r[0]: r for r in unseen.summary_rows("full", {**good, **poor}, ["regression", "gru"])}
    low, oracle, high = rows["10x too low"], rows["oracle's rate"], rows["10x too high"]
    assert low[1:] == ["2", "1 / 0 / 1", "1", f"{(0.35 + 1.6 / 1.5) / 2:.3f}", "1.067 (gru)", "0 / 1"]
    assert oracle[2:4] == ["0 / 1 / 1", "1"] and oracle[5:] == ["1.200 (gru)", "2 / 1"]
    # a diverged fixed run makes HDET's finite mean ahead; a diverged HDET run is behind and harm
    assert high[2:4] == ["1 / 0 / 1", "1"] and high[6] == "0 / 0"


def test_the_stored_summary_and_the_readme_table_are_the_stored_runs():
    # the README quotes the summary; a re-run that changes the table must change both (python -m
    # benchmarks.unseen --report-only, then python -m benchmarks.docs)
    out = common.results_dir("full")
    results = read_results(out / "unseen_runs.jsonl")
    names = [w for w in unseen.PLAN["full"]["workloads"] if any(k.split("/")[0] == w for k in results)]
    stored = (out / "unseen_summary.md").read_text()
    assert unseen.summary("full", results, names) == stored.strip()
    readme = docs.README.read_text()
    assert docs.readme_with_summary(readme, stored) == readme


def test_a_readme_without_the_markers_is_named():
    with pytest.raises(ValueError, match="unseen summary"):
        docs.readme_with_summary("# no table here\n", "| a |\n|---|\n| 1 |\n")
