"""The HDET service: REST job submission, the live hyperparameter trajectory, and a dashboard.

    app = service.create_app(Settings(data_dir="/tmp/hdet"))   # tests build their own
    hdet serve --host 127.0.0.1 --port 8000                    # production: settings from HDET_* env

It imports `hdet_ray` (the job spec, the trajectory record); `hdet_ray` never imports it.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.app import create_app
    from service.settings import Settings

__all__ = ["Settings", "create_app"]


def __getattr__(name: str):
    # Imported when used, so `import service.models` (request models) loads no app, Ray or torch.
    if name == "create_app":
        from service.app import create_app

        return create_app
    if name == "Settings":
        from service.settings import Settings

        return Settings
    raise AttributeError(f"module 'service' has no attribute {name!r}")
