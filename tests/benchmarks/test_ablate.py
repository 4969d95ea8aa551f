"""benchmarks.ablate's parsing of variants and cells, and its trace, on the stored benchmark runs (no run)."""

import pytest

from benchmarks import ablate


def test_a_variant_is_default_or_a_name_with_json_options():
    assert ablate.parse_variant("default") == ("default", {})
    assert ablate.parse_variant('w={"explore": [{"name": "lr", "size": 1.0}]}') == (
        "w",
        {"explore": [{"name": "lr", "size": 1.0}]},
    )
    for bad in ("nameonly", "w=[1]", "w={not json"):
        with pytest.raises(SystemExit, match="variant"):
            ablate.parse_variant(bad)


def test_a_cell_finds_its_start_from_the_stored_oracle_and_names_a_bad_cell():
    cell = ablate.Cell("lm/short/high")
    assert cell.k == cell.best + 2
    job = cell.job(0, "v", {"auto_lr": False})
    assert job["key"] == "lm/short/high/0/v" and job["hdet"] == {"auto_lr": False} and job["arm"] == "hdet"
    assert cell.stored_key(0, "hdet") in cell.stored  # the shipped default's run of this cell
    fixed = cell.job(7, ablate.FIXED, {"ignored": 1}, arm="fixed")
    assert fixed["arm"] == "fixed" and "hdet" not in fixed and fixed["max_lr"] == job["max_lr"]
    # fresh seeds (none stored): the oracle stays the benchmark's, over its stored seeds
    assert cell.oracle([7, 8]) == cell.oracle([0, 1, 2]) and cell.oracle([0]) != cell.oracle([0, 1, 2])
    held_out = ablate.Cell("lm_sgd/oracle")
    assert held_out.job(1, "v", {})["steps"] == held_out.job(1, "w", {})["steps"]
    with pytest.raises(SystemExit, match="start must be one of"):
        ablate.Cell("lm/short/middle")
    with pytest.raises(SystemExit, match="cell must be"):
        ablate.Cell("nope/oracle")


def test_the_trace_marks_moves_rollbacks_and_signs():
    def record(offset, new, signal, rollback=False, excluded=()):
        lr = {"offset": offset, "new_offset": new, "signal": signal}
        return {"rollback": rollback, "excluded": list(excluded), "params": {"lr": lr}}

    run = {
        "records": [
            record(0, 0, 0.3),
            record(0, 0.25, 0.4),
            record(0.25, 0.25, -0.1),
            record(0.25, -0.4, None, rollback=True),
            record(-0.4, -0.4, None, excluded=[2]),
            record(-0.4, -0.4, None),
            record(-0.4, -0.9, -0.2),
        ],
        "centres": [1.0, 0.5],
    }
    assert ablate.trace(run) == "+U-Rx.D 0.50x"
