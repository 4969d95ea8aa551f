"""The Ray layer: the TorchTrainer worker group, the controller actor, the job entrypoints, Ray Tune.

    from hdet_ray.ray import run_job
    result = run_job(JobSpec.from_file("examples/specs/digits.yaml"))

`run_job` and `JobResult` load on first use (PEP 562), so the controller actor's process, which imports
`hdet_ray.ray.actor`, loads Ray but no torch: a job's actor starts in about a third of the time.
`import hdet_ray` alone loads neither.
"""

from __future__ import annotations

from hdet_ray._lazy import lazy_names

_EXPORTS = {"JobResult": "hdet_ray.ray.job", "run_job": "hdet_ray.ray.job"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_names(__name__, globals(), _EXPORTS)
