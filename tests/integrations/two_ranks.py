"""What both trainer tests check of a 2-rank run's per-rank result files (`rank0.json`, `rank1.json`)."""

import json
from pathlib import Path


def checked_trajectory(out: Path, loss_max: float) -> list[dict]:
    """The ranks' results, after checking their trajectory: windows at steps 10, 20, 30 that every rank agrees
    on, each replica's own loss reached the controller, the replicas ran different rates, the rate moved."""
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    records = ranks[0]["records"]
    assert [r["step"] for r in records] == [10, 20, 30]
    assert records == ranks[1]["records"]  # one trajectory, every rank agrees
    for r in records:
        assert all(x is not None and 0 < x < loss_max for x in r["losses"])  # the loss reached the controller
        assert r["losses"][0] != r["losses"][1]  # each replica's own loss, not a shared number
        lr = r["params"]["lr"]
        assert lr["multipliers"][0] != lr["multipliers"][1]  # the replicas ran different rates
    offsets = [r["params"]["lr"]["new_offset"] for r in records]
    assert any(r["acted"] for r in records) and any(o != 0 for o in offsets)  # the controller moved the rate
    assert all(rank["replicas_identical"] for rank in ranks)
    return ranks
