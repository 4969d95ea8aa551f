"""The HDET service: REST job submission, the live hyperparameter trajectory, and a dashboard.

    app = service.create_app(Settings(data_dir="/tmp/hdet"))   # tests build their own
    hdet serve --host 127.0.0.1 --port 8000                    # production: settings from HDET_* env

It imports `hdet_ray` (the job spec, the trajectory record); `hdet_ray` never imports it.
"""

from service.app import create_app
from service.settings import Settings

__all__ = ["Settings", "create_app"]
