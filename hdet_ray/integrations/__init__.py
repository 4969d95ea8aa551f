"""Where HDET meets the tools people already use.

- `hdet_ray.integrations.transformers.HDETCallback`: Hugging Face `Trainer`.
- `hdet_ray.integrations.lightning.HDETCallback`: Lightning `Trainer`.
- `hdet_ray.integrations.loggers`: `on_record` adapters writing the trajectory to TensorBoard and MLflow.

Each module imports its framework only when imported itself (install `hdet-ray[integrations]`).
"""
