"""The deploy/ manifests, loaded and checked as the API server and the KubeRay operator would, with no
cluster: `schema_errors` validates a RayJob/RayCluster against the operator's CRD schema (from
`../shared/kuberay/`, never copied into the repository), `operator_errors` applies the checks the operator
makes that no schema expresses (listed in that folder's README).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERAY_CRDS = REPO.parent / "shared" / "kuberay"
CRD_FILES = {"RayJob": "ray.io_rayjobs.yaml", "RayCluster": "ray.io_rayclusters.yaml"}
PART_OF = "hdet-ray"

# The submission modes of KubeRay 1.5+ (the CRD types the field as a plain string).
SUBMISSION_MODES = {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"}
# Ray token auth exists from Ray 2.52.0 on; KubeRay refuses authOptions.mode=token below it.
TOKEN_AUTH_MIN_RAY = (2, 52, 0)
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
RAYJOB_NAME_MAX = 47  # KubeRay derives longer names (cluster, submitter Job) from it
DNS_LABEL_MAX = 63


@dataclass(frozen=True)
class Manifest:
    path: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.doc["kind"]

    @property
    def name(self) -> str:
        return self.doc["metadata"]["name"]

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.kind}/{self.name}"


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


@lru_cache(maxsize=1)
def _load() -> tuple[Manifest, ...]:
    return tuple(
        Manifest(path, doc)
        for path in manifest_files()
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    )


def manifests(kind: str | None = None) -> list[Manifest]:
    return [m for m in _load() if kind is None or m.kind == kind]


def one(kind: str) -> Manifest:
    found = manifests(kind)
    assert len(found) == 1, f"expected one {kind} in deploy/, found {[str(m) for m in found]}"
    return found[0]


def ray_pin() -> str:
    """The Ray version pyproject.toml pins in its `ray` extra."""
    match = re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', (REPO / "pyproject.toml").read_text())
    assert match, "pyproject.toml pins no ray[...]==X.Y.Z"
    return match.group(1)


# --- pods and containers -------------------------------------------------------------------------------


def pod_specs(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(group, pod spec) for every pod template in a RayJob, RayCluster or Deployment."""
    spec = doc.get("spec") or {}
    if doc["kind"] == "Deployment":
        yield "deployment", spec["template"]["spec"]
        return
    cluster = spec.get("rayClusterSpec", spec) if doc["kind"] == "RayJob" else spec
    yield "head", cluster["headGroupSpec"]["template"]["spec"]
    for group in cluster.get("workerGroupSpecs") or []:
        yield group["groupName"], group["template"]["spec"]


def containers(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(group, container, pod spec) for every container of a manifest's pods."""
    for group, pod in pod_specs(doc):
        for container in pod["containers"]:
            yield group, container, pod


def entrypoint_argv(rayjob: dict[str, Any]) -> list[str]:
    return shlex.split(rayjob["spec"]["entrypoint"])


# --- the CRD schemas -----------------------------------------------------------------------------------


def crds_present() -> bool:
    return all((KUBERAY_CRDS / f).is_file() for f in CRD_FILES.values())


CRDS_ABSENT = (
    f"the KubeRay CRD schemas are not at {KUBERAY_CRDS} (../shared/kuberay relative to the "
    f"repository root); schema validation needs {sorted(CRD_FILES.values())}"
)


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((KUBERAY_CRDS / CRD_FILES[kind]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every way `doc` breaks its CRD's v1 schema, as 'path.to.field: message' (Draft 7)."""
    from jsonschema import Draft7Validator

    validator = Draft7Validator(crd_schema(doc["kind"]))
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in validator.iter_errors(doc)
    )


# --- the operator's own checks -------------------------------------------------------------------------


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(text))[:3])


def _name_errors(name: str, limit: int, kind: str) -> list[str]:
    errors = []
    if not DNS1035.match(name):
        errors.append(
            f"metadata.name: {kind} name {name!r} is not a DNS-1035 label "
            "(lower case letters, digits and '-', starting with a letter)"
        )
    if len(name) > limit:
        errors.append(f"metadata.name: {kind} name {name!r} has {len(name)} characters, at most {limit}")
    return errors


def _cluster_errors(cluster: dict[str, Any], where: str) -> list[str]:
    errors = []
    autoscaling = bool(cluster.get("enableInTreeAutoscaling", False))
    names = [g.get("groupName") for g in cluster.get("workerGroupSpecs") or []]
    if len(set(names)) != len(names):
        errors.append(f"{where}workerGroupSpecs: group names must be unique, got {names}")
    for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
        at = f"{where}workerGroupSpecs[{i}]"
        low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
        if low > high:
            errors.append(f"{at}: minReplicas ({low}) must be <= maxReplicas ({high})")
        replicas = group.get("replicas")
        if not autoscaling and replicas is not None and not low <= replicas <= high:
            errors.append(
                f"{at}.replicas: {replicas} must lie in [minReplicas, maxReplicas] = "
                f"[{low}, {high}] when autoscaling is off"
            )
    auth = cluster.get("authOptions") or {}
    if auth.get("mode") == "token" and _version(cluster.get("rayVersion", "0")) < TOKEN_AUTH_MIN_RAY:
        errors.append(
            f"{where}authOptions.mode: token auth needs rayVersion >= 2.52.0, "
            f"got {cluster.get('rayVersion')!r}"
        )
    return errors


def operator_errors(doc: dict[str, Any]) -> list[str]:
    """The checks the KubeRay operator makes beyond the schema (see ../shared/kuberay/README.md)."""
    spec = doc.get("spec") or {}
    name = (doc.get("metadata") or {}).get("name", "")
    if doc["kind"] == "RayCluster":
        return _name_errors(name, DNS_LABEL_MAX, "RayCluster") + _cluster_errors(spec, "spec.")
    errors = _name_errors(name, RAYJOB_NAME_MAX, "RayJob")
    if ("rayClusterSpec" in spec) == ("clusterSelector" in spec):
        errors.append("spec: a RayJob sets exactly one of rayClusterSpec or clusterSelector")
    if spec.get("ttlSecondsAfterFinished", 0) > 0 and spec.get("shutdownAfterJobFinishes") is not True:
        errors.append("spec.ttlSecondsAfterFinished: > 0 requires shutdownAfterJobFinishes: true")
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode not in SUBMISSION_MODES:
        errors.append(f"spec.submissionMode: {mode!r} is not one of {sorted(SUBMISSION_MODES)}")
    if "runtimeEnvYAML" in spec:
        try:
            runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
        except yaml.YAMLError as e:
            errors.append(f"spec.runtimeEnvYAML: does not parse as YAML: {e}")
        else:
            if not isinstance(runtime_env, dict):
                errors.append("spec.runtimeEnvYAML: must be a YAML mapping (a runtime_env)")
    if "rayClusterSpec" in spec:
        errors += _cluster_errors(spec["rayClusterSpec"], "spec.rayClusterSpec.")
    return errors
