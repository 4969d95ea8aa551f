"""The README's torchrun example, run for real: 4 CPU processes under torchrun."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_two_examples_differ_only_by_the_scheduler_swap():
    plain = (ROOT / "examples/digits_onecycle.py").read_text().splitlines()
    hdet = (ROOT / "examples/digits_hdet.py").read_text().splitlines()

    def code(lines):
        return [line for line in lines[lines.index("import argparse") :]]

    added = [line for line in code(hdet) if line not in code(plain)]
    assert any("HDETOneCycleLR(optimizer" in line for line in added)
    assert "    scheduler.step(loss=loss)" in added


@pytest.mark.slow
def test_torchrun_hdet_example_prints_its_trajectory():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "4",
            str(ROOT / "examples/digits_hdet.py"),
            "--steps",
            "200",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    windows = re.findall(r"^window +(\d+) step +\d+ base lr x([0-9.]+)", out.stdout, re.MULTILINE)
    assert [int(w) for w, _ in windows] == list(range(20))  # the default sync period: 200 // 20
    # every window says what the controller decided and why (moved, or held for a stated reason)
    notes = re.findall(r"^window .*\] (.+)$", out.stdout, re.MULTILINE)
    assert len(notes) == 20 and all(("holding" in n) or ("moved" in n) for n in notes), out.stdout
    assert "validation:" in out.stdout
