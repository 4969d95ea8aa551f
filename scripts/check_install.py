"""Exit 0 when this checkout needs no `pip install -e ".[all]"`, 1 otherwise (used by scripts/setup).

Current means: `hdet_ray` and `service` import from this tree (an editable install of it, or PYTHONPATH),
and every requirement in pyproject.toml, with all extras, is installed at an allowed version.

    python scripts/check_install.py [--verbose]
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def requirements(project: dict) -> list[str]:
    """The project's dependencies plus those of every extra; extras naming the project itself expand."""
    own = project["name"].lower()
    extras = project.get("optional-dependencies", {})
    out = list(project.get("dependencies", []))
    for reqs in extras.values():
        out += [r for r in reqs if _NAME.match(r).group(1).lower() != own]
    return out


def problems() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: no TOML reader in the standard library
        return ["cannot read pyproject.toml without tomllib (Python >= 3.11)"]
    found = []
    for package in ("hdet_ray", "service"):
        spec = importlib.util.find_spec(package)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin is None or REPO not in origin.parents:
            found.append(f"{package} imports from {origin}, not from {REPO}")
    try:
        from packaging.requirements import Requirement
    except ModuleNotFoundError:
        return [*found, "the `packaging` module is missing, so versions cannot be checked"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for text in requirements(project):
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            found.append(f"{req.name} is not installed")
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            found.append(f"{req.name} {version} does not satisfy {req.specifier}")
    return found


if __name__ == "__main__":
    found = problems()
    if "--verbose" in sys.argv:
        print("\n".join(found) or "the installed environment is current for this checkout")
    sys.exit(1 if found else 0)
