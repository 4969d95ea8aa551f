"""benchmarks.adopt: which stored run an ablate run replaces, and the rewrite of a results file (no run)."""

import json

import pytest

from benchmarks import adopt
from benchmarks.ablate import Cell


def test_an_ablate_key_names_its_cell_replicas_seed_and_variant():
    assert adopt.parse_key("unseen/regression/oracle/3/nodown") == (
        "unseen/regression/oracle",
        4,
        3,
        "nodown",
    )
    assert adopt.parse_key("issue/lm/high@n8/0/sd25") == ("issue/lm/high", 8, 0, "sd25")
    assert adopt.parse_key("lm/short/high/12/default") == ("lm/short/high", 4, 12, "default")


def test_a_run_replaces_its_cells_stored_run_and_a_side_files_default_arm_but_a_fresh_seed_nothing(tmp_path):
    cell = Cell("unseen/regression/oracle")
    source, side = tmp_path / "made.jsonl", tmp_path / "side.jsonl"
    rows = [{"key": f"unseen/regression/oracle/{s}/nodown", "metric": 0.5 + s} for s in (1, 30)]
    rows.append({"key": "unseen/regression/oracle/1/other", "metric": 9.0})  # another variant: not moved
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    side.write_text(json.dumps({"key": "unseen/regression/oracle/30/default", "metric": 2.0}) + "\n")
    moves = adopt.plan(source, "nodown", [side])
    assert moves == [
        (cell.stored_file, cell.stored_key(1, "hdet"), "unseen/regression/oracle/1/nodown"),
        (side, "unseen/regression/oracle/30/default", "unseen/regression/oracle/30/nodown"),
    ]  # seed 30 is no seed of the benchmark's: in its file it replaces nothing


def test_the_rewrite_replaces_only_the_named_runs_keeps_the_order_and_refuses_a_missing_one(tmp_path):
    target, source = tmp_path / "stored.jsonl", tmp_path / "made.jsonl"
    target.write_text(
        "".join(json.dumps({"key": k, "metric": m}) + "\n" for k, m in [("a", 1), ("b", 2), ("c", 3)])
    )
    source.write_text(json.dumps({"key": "x/0/new", "metric": 7, "records": []}) + "\n")
    adopt.apply([(target, "b", "x/0/new")], source)
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert rows == [
        {"key": "a", "metric": 1},
        {"key": "b", "metric": 7, "records": []},
        {"key": "c", "metric": 3},
    ]
    before = target.read_text()
    with pytest.raises(SystemExit, match="no run 'z'"):
        adopt.apply([(target, "z", "x/0/new")], source)
    assert target.read_text() == before  # nothing written when a named run is not there


def test_changed_keeps_only_the_moves_whose_stored_run_todays_controller_no_longer_reproduces(tmp_path):
    cell = Cell("unseen/regression/high")
    stored = cell.stored[cell.stored_key(0, "hdet")]  # a stored run: its decisions replay as recorded
    doctored = json.loads(json.dumps(stored))
    doctored["records"][0]["params"]["lr"]["new_offset"] += (
        0.25  # a decision today's controller would not make
    )
    side = tmp_path / "side.jsonl"
    side.write_text(
        json.dumps({**doctored, "key": "unseen/regression/high/0/default"})
        + "\n"
        + json.dumps({"key": "unseen/regression/high/1/default", "metric": 1.0})  # no records: not judged
        + "\n"
    )
    moves = [
        (cell.stored_file, cell.stored_key(0, "hdet"), "unseen/regression/high/0/new"),
        (side, "unseen/regression/high/0/default", "unseen/regression/high/0/new"),
        (side, "unseen/regression/high/1/default", "unseen/regression/high/1/new"),
    ]
    assert adopt.changed(moves) == [moves[1]]


def test_changed_also_keeps_a_move_whose_stored_run_the_stuck_rule_no_longer_reproduces(tmp_path):
    cell = Cell("unseen/regression/high")
    stored = cell.stored[cell.stored_key(0, "hdet")]
    doctored = json.loads(json.dumps(stored))
    # a stuck verdict the shipped health checks would not give, on a window every replica passed
    record = doctored["records"][0]
    record["reasons"] = {
        str(i): "stuck: every replica at 1 whatever its rate" for i in range(len(record["losses"]))
    }
    side = tmp_path / "side.jsonl"
    side.write_text(json.dumps({**doctored, "key": "unseen/regression/high/0/default"}) + "\n")
    moves = [
        (cell.stored_file, cell.stored_key(0, "hdet"), "unseen/regression/high/0/new"),
        (side, "unseen/regression/high/0/default", "unseen/regression/high/0/new"),
    ]
    assert adopt.changed(moves) == [moves[1]]
