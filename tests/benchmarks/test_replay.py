"""`benchmarks.replay` on the stored runs: the shipped controller reproduces every recorded decision, and a
setting the runs depend on is found where it acted."""

import json
import math

import pytest

from benchmarks import common, replay

N8 = common.results_dir("full") / "issue_setting_n8_runs.jsonl"


def test_the_shipped_settings_reproduce_the_stored_runs_and_a_changed_one_is_found():
    changes, total, stale = replay.replay([N8], {})
    assert total >= 27 and stale == 0 and changes == []
    # without the fit floor the CNN at its best rate climbs again once its training set is fitted
    changes, _, _ = replay.replay([N8], {"fit_floor": None})
    found = {c.key: c for c in changes}
    assert "cnn/0/hdet/3" in found
    c = found["cnn/0/hdet/3"]
    assert c.after[0] > c.before[0]  # a move up the floor held
    assert all(not k.startswith("lm/") for k in found)  # the LM never reaches the floor


TABLES = (
    "quality_runs.jsonl",
    "unseen_runs.jsonl",
    "holdout_runs.jsonl",
    "horizon_runs.jsonl",
    "issue_setting_runs.jsonl",
    "issue_setting_n2_runs.jsonl",
    "issue_setting_n8_runs.jsonl",
)


def test_every_hdet_run_of_the_tables_is_the_shipped_controllers():
    # docs/benchmarks.md's tables are the runs of the defaults that ship: fed back through today's controller
    # every stored HDET run of them repeats each recorded decision (a default changed, or a refactor that
    # moves one decision, fails here until the runs it changes are re-made)
    rows = [(f, row) for f in TABLES for row in replay.hdet_runs(common.results_dir("full") / f)]
    assert len(rows) >= 1000
    other = [(f, row["key"]) for f, row in rows if replay.replayed(row, {}) != replay.recorded(row)]
    assert other == [], f"{len(other)} stored runs of the tables were made by another controller: {other[:5]}"


def test_a_rollback_past_the_offsets_limit_is_clamped_as_the_engine_clamps_it():
    # the waveforms CNN from 10x too high, seed 0, rolled back in its last window from 0.001x of its start
    # to "0.5 x the lowest replica's" rate, below the offset's lower limit (ln 1000): the engine clamps it.
    # That run was made before `rise_rollback` (which rolls back its window 3 and re-made it), so it is
    # replayed without that rule
    before = common.results_dir("full") / "rise_rollback_before_runs.jsonl"
    row = next(r for r in replay.hdet_runs(before) if r["key"] == "unseen_runs:waveforms/0/hdet/5")
    assert replay.replayed(row, {"rise_rollback": None}) == replay.recorded(row)
    assert replay.replayed(row, {}) != replay.recorded(row)
    assert replay.recorded(row)[-1] == (round(-math.log(1000.0), 9), True)


def test_bad_settings_name_the_field(capsys):
    with pytest.raises(SystemExit):
        replay.main(['{"fit_floor": 2}', "--results", str(N8)])
    assert "fit_floor must be in (0, 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        replay.main(["[1]", "--results", str(N8)])
    assert "JSON object" in capsys.readouterr().err


def test_a_row_is_rebuilt_into_the_windows_the_controller_read():
    row = next(replay.hdet_runs(N8))
    windows = list(replay.windows(row))
    assert len(windows) == len(row["records"])
    first = row["records"][0]
    assert windows[0].initial_loss == first["start_loss"]
    assert windows[0].losses == tuple(first["losses"])
    assert json.dumps(replay.recorded(row))  # plain data
    # where the schedule's base is at the next window's end: the next record's (none after the last)
    bases = [r["params"]["lr"]["base"] for r in row["records"]]
    assert [w.params["lr"].next_base for w in windows[:-1]] == bases[1:]
    assert windows[-1].params["lr"].next_base != windows[-1].params["lr"].next_base  # NaN


def test_a_first_window_rollback_cut_for_the_rise_is_found_on_a_short_warm_up():
    # `rollback_ahead_first_window` acts only in a run's first window, which no stored run rolls back in; with
    # pct_start=0.1 the MLP from 10x too high fails there, and the cut for the rise is log 2 further down
    shapes = common.results_dir("full") / "shape_pct10_runs.jsonl"
    assert replay.replay([shapes], {}, arm="default")[0] == []
    changes, _, _ = replay.replay([shapes], {"rollback_ahead_first_window": True}, arm="default")
    assert {c.key for c in changes} == {f"issue/mlp/high/{s}/default" for s in (0, 1, 2, 3, 5, 6)}
    assert all(c.window == 0 and c.after[0] < c.before[0] for c in changes)


def test_the_stuck_rule_is_replayed_on_the_recorded_window_means():
    n2 = common.results_dir("full") / "issue_setting_n2_runs.jsonl"
    changes, total, stale = replay.replay_stuck([n2], {})
    assert total >= 30 and stale == 0 and changes == []
    # on 2 replicas the median is the worse one: only the best replica's progress shows the run had learned
    changes, _, _ = replay.replay_stuck([n2], {"replica_learned": False})
    assert [(c.key, c.window) for c in changes] == [("mlp/3/hdet/6", 5)]
    assert changes[0].before[0] and not changes[0].after[0]


def test_bad_health_settings_name_the_field(capsys):
    with pytest.raises(SystemExit):
        replay.main(["--stuck", '{"stuck_spread": 2}', "--results", str(N8)])
    assert "stuck_spread must be in [0, 1)" in capsys.readouterr().err


def test_the_stuck_rule_waits_for_its_second_window_in_a_row():
    n2 = common.results_dir("full") / "issue_setting_n2_runs.jsonl"
    changes, _, _ = replay.replay_stuck([n2], {"stuck_windows": 3})
    assert [(c.key, c.window) for c in changes] == [("mlp/3/hdet/6", 5)]
    assert changes[0].before[0] and not changes[0].after[0]  # one window later than it acted


def test_a_network_killed_before_it_learned_is_found_by_the_stuck_rule_after_a_blow_up():
    runs = common.results_dir("full") / "fanout_runs.jsonl"
    changes, total, stale = replay.replay_stuck([runs], {}, arm="local")
    assert total >= 70 and stale == 0 and changes == []
    # the MLP from 10x too high under fanout='local', seed 1: replicas blew up in windows 1 and 2, then sat
    # at ln 10 whatever their rates; the rule rolled it back at window 7 (its second flat window in a row)
    changes, _, _ = replay.replay_stuck([runs], {"stuck_after_blowup": False}, arm="local")
    assert [(c.key, c.window) for c in changes] == [("mlp/short/high/1/local", 7)]
    assert changes[0].before == (1.0, True) and not changes[0].after[0]


def test_a_record_keeps_what_health_judged_each_replica_on_and_replays_its_verdict():
    import math

    from hdet_ray.core.controller import ParamWindow, Window
    from hdet_ray.core.health import HealthConfig, ReplicaStats, assess
    from hdet_ray.core.records import WindowRecord, draft_record

    # the bandit's window 0 (tests/core/test_health.py): the draw holds three "blow-ups" of its surrogate
    means, firsts = (-0.00067, 0.00039, 0.00009, 0.00022), (-0.0052, 0.0003, 0.0018, math.nan)
    stats = [
        ReplicaStats(mean_loss=m, first_loss=f, tail_loss=m, min_loss=m - 0.001, params_finite=True, count=25)
        for m, f in zip(means, firsts, strict=True)
    ]
    params = {
        "lr": ParamWindow(
            scale="log", base=1e-4, offset=0.0, coords=(0.2, 0.05, -0.05, -0.2), values=(1e-4,) * 4
        )
    }
    window = Window(window=0, step=25, total_steps=500, losses=means, healthy=(True,) * 4, params=params)
    record = draft_record(window, stats, {}, {"lr": [1.2, 1.05, 0.95, 0.8]}, -0.001)
    back = WindowRecord.from_dict(json.loads(record.to_json()))  # strict JSON: the NaN first loss is null
    assert math.isnan(back.first_losses[3]) and back.counts == [25] * 4
    replayed = replay.replica_stats(back)
    for a, b in zip(replayed, stats, strict=True):
        assert (a.mean_loss, a.tail_loss, a.min_loss, a.count) == (
            b.mean_loss,
            b.tail_loss,
            b.min_loss,
            b.count,
        )
    assert assess(replayed, HealthConfig()) == assess(stats, HealthConfig()) == ([True] * 4, {})
    # a record written before these lists: every replica gets the start as its first loss (no draw)
    old = json.loads(record.to_json())
    for key in ("first_losses", "tail_losses", "min_losses", "counts"):
        del old[key]
    legacy = replay.replica_stats(WindowRecord.from_dict(old))
    assert [s.first_loss for s in legacy] == [-0.001] * 4 and [s.tail_loss for s in legacy] == list(means)
