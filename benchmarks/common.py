"""What every benchmark shares: where results go, the machine line, JSON and Markdown output."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
IMAGES = ROOT / "docs" / "img"


def results_dir(mode: str) -> Path:
    path = RESULTS / mode
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine() -> dict[str, Any]:
    """The machine a figure was measured on (stated beside every figure)."""
    import torch

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = math.nan
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_avg_1min_at_start": round(load, 2),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def cpu_model() -> str:
    """The processor and the instruction set torch's CPU kernels use, e.g. "AMD EPYC (family 25, model 17),
    AVX512": two machines that differ here can round a matrix product differently, and at a chaotic cell a
    run's end then differs (fixed OneCycle's as much as HDET's); the platform string does not tell them
    apart."""
    import torch

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    break
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return f"{name}, {torch.backends.cpu.get_cpu_capability()}"


def machine_line(m: dict[str, Any]) -> str:
    cpu = f"; {m['cpu']}" if "cpu" in m else ""
    return (
        f"{m['cpus']} CPUs ({m['platform']}{cpu}), Python {m['python']}, torch {m['torch']}, "
        f"1-min load average {m['load_avg_1min_at_start']} at start (the machine is shared), "
        f"commit {m['commit']}, {m['date']}"
    )


def _commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=ROOT,
                capture_output=True,
                check=False,
                text=True,
                timeout=10,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def command_line() -> str:
    module = Path(sys.argv[0]).stem
    return " ".join(["python -m", f"benchmarks.{module}", *sys.argv[1:]])


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, allow_nan=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; floats are shown with 4 significant digits."""

    def cell(x: Any) -> str:
        if isinstance(x, float):
            return "n/a" if math.isnan(x) else f"{x:.4g}"
        return str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def final_metric(results: dict[str, dict[str, Any]], key: str) -> float:
    """A stored run's final metric; a diverged run (not finite) counts as infinitely bad."""
    v = results[key]["metric"]
    return v if math.isfinite(v) else math.inf


def mean_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value); NaN when a value is not finite."""
    if not values or not all(math.isfinite(v) for v in values):
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt_ms(mean: float, sd: float) -> str:
    return "n/a" if math.isnan(mean) else f"{mean:.4g} ± {sd:.2g}"


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row, allow_nan=True) + "\n")
