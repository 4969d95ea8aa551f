"""Import cost is part of the layering: the pure core loads no torch, while the package's top-level names
(resolved lazily, PEP 562) still reach the engine. Each check runs in a fresh interpreter, since this test
process has long imported torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE = [
    "hdet_ray",
    "hdet_ray.core",
    "hdet_ray.core.controller",
    "hdet_ray.core.evidence",
    "hdet_ray.core.frame",
    "hdet_ray.core.health",
    "hdet_ray.core.hyperparams",
    "hdet_ray.core.records",
    "hdet_ray.core.spread",
    "hdet_ray.spec",
    "hdet_ray.task_names",
]


def fresh(code: str) -> list[str]:
    """What `code`, run in a new interpreter, prints (split on whitespace); it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("module", CORE)
def test_the_core_loads_no_torch(module):
    loaded = f"import sys, {module}; print(*[m for m in ('torch', 'ray', 'fastapi') if m in sys.modules])"
    assert fresh(loaded) == []


def test_the_controller_actor_validates_a_spec_without_torch():
    """The controller actor's process imports `hdet_ray.ray.actor` and validates the job's spec; torch
    there would add seconds to every job's start (it did: ~3 s of 6 on 2 CPUs)."""
    actor = (
        "import sys\n"
        "from hdet_ray.ray.actor import ControllerActor\n"
        "from hdet_ray.spec import JobSpec\n"
        "JobSpec.model_validate({'task': 'digits', 'replicas': 2, 'steps': 20})\n"
        "print('torch' in sys.modules, 'ray' in sys.modules)"
    )
    assert fresh(actor) == ["False", "True"]


def test_top_level_names_still_reach_the_engine():
    engine = (
        "import sys, hdet_ray\n"
        "from hdet_ray import HDETOneCycleLR, make_controller\n"
        "assert HDETOneCycleLR.__module__ == 'hdet_ray.engine.scheduler'\n"
        "assert set(hdet_ray.__all__) <= set(dir(hdet_ray))\n"
        "print('torch' in sys.modules, all(getattr(hdet_ray, n) is not None for n in hdet_ray.__all__))"
    )
    assert fresh(engine) == ["True", "True"]


def test_an_unknown_name_is_an_attribute_error():
    import hdet_ray

    with pytest.raises(AttributeError, match="no attribute 'HDETOneCycle'"):
        hdet_ray.HDETOneCycle  # noqa: B018
