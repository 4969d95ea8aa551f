"""A staged-promotion study on digits end to end on a real local Ray: record, budget, kill and resume,
frozen gates, on the suite's session Ray (`local_ray`)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hdet_ray.promotion.budget import cells_per_candidate
from hdet_ray.promotion.decisions import decide_stage
from hdet_ray.promotion.protocol import Study

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "studies" / "digits.yaml"


@pytest.fixture(scope="module")
def cluster(local_ray):
    return local_ray.get_runtime_context().gcs_address


def example(**changes) -> dict:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update(changes)
    return data


def test_six_candidates_three_stages_with_a_crashing_one(cluster, tmp_path):
    from hdet_ray.promotion.runner import run_study

    data = example(name="e2e")
    # width 0 makes the task constructor raise in every attempt: retried once, then failed
    data["candidates"].append({"name": "broken", "overrides": {"task_options": {"width": 0}}})
    (control,) = [c for c in data["candidates"] if c["name"] == "control"]
    control["continuable"] = False
    study = Study.parse(data)
    record = run_study(study, tmp_path, log=lambda line: None)
    cells, rec = record.cells, record.data

    assert rec["status"] == "finished"
    broken = cells["screen/broken/s0"]
    assert broken["status"] == "failed" and len(broken["attempts"]) == 2
    assert "width" in broken["attempts"][-1]["error"]
    assert rec["decisions"]["screen"]["outcomes"]["broken"]["rule"] == "failed"
    # the retained set reaches the final stage; the final stage has 2 seeds per candidate
    final = [c for c in cells.values() if c["stage"] == "final"]
    assert {"ref", "control"} <= {c["candidate"] for c in final}
    assert all(sum(1 for c in final if c["candidate"] == k) == 2 for k in {c["candidate"] for c in final})
    assert len({c["candidate"] for c in cells.values()}) == 7
    # continuation as declared: ref continues from its screen cell; control (retained, so it always reaches
    # confirm; made continuable: false above) restarts from scratch
    assert cells["confirm/ref/s1"]["continued_from"] == "screen/ref/s0"
    assert cells["confirm/ref/s1"]["steps_run"] == 60 and cells["confirm/ref/s1"]["budget_steps"] == 90
    assert cells["confirm/control/s1"]["continued_from"] is None
    assert cells["confirm/control/s1"]["steps_run"] == 90
    # the decisions are a pure function of the recorded numbers
    for k, stage in enumerate(study.stages):
        assert (
            decide_stage(study, k, record.table(study, stage.name)).to_dict() == rec["decisions"][stage.name]
        )

    # budget: recomputed from the cells
    budget = rec["budget"]
    spent = {
        s.name: sum(c["worker_seconds"] for c in cells.values() if c["stage"] == s.name) / 3600
        for s in study.stages
    }
    assert [b["worker_hours"] for b in budget["stages"]] == pytest.approx(list(spent.values()))
    assert budget["spent_hours"] == pytest.approx(sum(spent.values()))
    assert all(
        c["worker_seconds"] >= sum(a["worker_seconds"] for a in c["attempts"]) - 1e-9 for c in cells.values()
    )
    names = [s.name for s in study.stages]
    for k, cf in enumerate(budget["counterfactuals"]):
        ran = len({c["candidate"] for c in cells.values() if c["stage"] == names[k]})
        later = 0.0
        for j in range(k + 1, len(names)):
            per_cell = [c["worker_seconds"] / 3600 for c in cells.values() if c["stage"] == names[j]]
            later += ran * cells_per_candidate(study, j) * sum(per_cell) / len(per_cell)
        assert cf["candidates"] == ran and cf["later_hours"] == pytest.approx(later)
        assert cf["total_hours"] == pytest.approx(sum(spent[n] for n in names[: k + 1]) + later)

    md = (record.path / "record.md").read_text()
    assert "## Stage `final`" in md and "Counterfactuals" in md and "screen/broken/s0" in md
    assert (record.path / "record.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((record.path / "record.json").read_text())["fingerprint"] == rec["fingerprint"]


def _promote(study_file: Path, out: Path, address: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hdet_ray",
            "promote",
            str(study_file),
            "--out",
            str(out),
            "--address",
            address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")},
    )


def test_killed_runner_resumes_without_rerunning_finished_cells_and_a_changed_gate_is_refused(
    cluster, tmp_path, capsys
):
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(example(name="resume")))
    record_file = tmp_path / "out" / "resume" / "record.json"

    first = _promote(study_file, tmp_path / "out", cluster)
    deadline = time.monotonic() + 180
    before = {}
    while time.monotonic() < deadline and first.poll() is None:
        if record_file.exists():
            before = json.loads(record_file.read_text())["cells"]
            if len(before) >= 3:
                break
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert len(before) >= 3, first.stdout.read()
    before = json.loads(record_file.read_text())
    assert before["status"] == "running", "the runner finished before it could be killed"

    second = _promote(study_file, tmp_path / "out", cluster)
    output = second.communicate(timeout=300)[0]
    assert second.returncode == 0, output
    after = json.loads(record_file.read_text())
    assert after["status"] == "finished" and after["fingerprint"] == before["fingerprint"]
    for cell_id, cell in before["cells"].items():
        assert after["cells"][cell_id]["run_id"] == cell["run_id"], f"{cell_id} was run again"
    assert f"{len([c for c in before['cells'] if c.startswith('screen/')])} already in the record" in output
    assert len(after["cells"]) > len(before["cells"])

    # change a gate after stage 1 started: refused, naming the change, before anything runs
    changed = example(name="resume")
    changed["gates"][0]["margin"] = 0.02
    study_file.write_text(yaml.safe_dump(changed))
    from hdet_ray.cli import main

    assert main(["promote", str(study_file), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "gates.0.margin: 0.01 -> 0.02" in err and "new study" in err
    assert json.loads(record_file.read_text()) == after
