"""The Ray layer: the TorchTrainer worker group, the controller actor, the job entrypoints, Ray Tune.

    from hdet_ray.ray import run_job
    result = run_job(JobSpec.from_file("examples/specs/digits.yaml"))

Importing this package imports Ray; `import hdet_ray` alone does not.
"""

from hdet_ray.ray.job import JobResult, run_job

__all__ = ["JobResult", "run_job"]
