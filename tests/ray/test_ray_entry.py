"""`hdet run` / `python -m hdet_ray run` refuse an invalid spec before anything starts, naming the field;
`import hdet_ray` stays free of Ray and FastAPI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hdet_ray.cli import main

GOOD = {"task": "digits", "replicas": 2, "steps": 40, "sync_every": 10}


@pytest.mark.parametrize(
    "change, field, allowed",
    [
        ({"replicas": 0}, "replicas", "greater than or equal to 1"),
        ({"schedule": {"max_lr": -0.1}}, "schedule.max_lr", "greater than 0"),
        ({"task": "imagenet"}, "task", "registered"),
        ({"explore": [{"name": "lr", "spread": "log", "size": 0.5}]}, "size", ">= 1"),
        ({"sync_every": 50}, "sync_every", "<= steps (40)"),
        ({"task_options": {"width": 0}}, "task_options", "width"),
    ],
)
def test_invalid_spec_fails_before_ray_starts(change, field, allowed, capsys, monkeypatch):
    import ray

    # the suite's session Ray may be up already, so "not started" is checked by refusing to start one
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was called for an invalid spec"))
    rc = main(["run", "--spec-json", json.dumps({**GOOD, **change})])
    err = capsys.readouterr().err
    assert rc == 2
    assert field in err and allowed in err, err
    assert "Traceback" not in err


def test_module_entrypoint_reports_a_bad_spec_file_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: digits\nreplicas: 0\nsteps: 10\nsync_every: 5\n")
    done = subprocess.run(
        [sys.executable, "-m", "hdet_ray", "run", str(bad)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "replicas" in done.stderr and "Traceback" not in done.stderr


def test_import_hdet_ray_imports_neither_ray_nor_fastapi():
    code = "import sys, hdet_ray; print(sorted(m for m in ('ray', 'fastapi') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def test_both_spec_sources_at_once_is_an_error(capsys):
    assert main(["run", "examples/specs/digits.yaml", "--spec-json", "{}"]) == 2
    assert "exactly one" in capsys.readouterr().err
