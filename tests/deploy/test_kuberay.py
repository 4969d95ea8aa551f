"""The RayJob and RayCluster validate against KubeRay's CRD schemas and pass the operator's own checks;
and each check fails when a manifest is broken (a required field removed, a type or rule broken).

No cluster: the schemas come from ../shared/kuberay/ (skipped with a reason where absent); the operator's
checks are restated in k8s_manifests.operator_errors, since no operator can run here.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import pytest
from k8s_manifests import CRDS_ABSENT, crds_present, manifests, one, operator_errors, schema_errors

# CI always has ../shared beside its clone: there a missing schema is a failure, not a silent skip
if os.environ.get("CI") and not crds_present():
    raise RuntimeError(CRDS_ABSENT)
needs_crds = pytest.mark.skipif(not crds_present(), reason=CRDS_ABSENT)
KUBERAY = [m for m in manifests() if m.kind in ("RayJob", "RayCluster")]


def test_there_is_a_rayjob_and_a_raycluster():
    assert sorted(m.kind for m in KUBERAY) == ["RayCluster", "RayJob"]


@needs_crds
@pytest.mark.parametrize("manifest", KUBERAY, ids=str)
def test_validates_against_the_crd_schema(manifest):
    assert schema_errors(manifest.doc) == []


@pytest.mark.parametrize("manifest", KUBERAY, ids=str)
def test_passes_the_operators_checks(manifest):
    assert operator_errors(manifest.doc) == []


def _cluster(kind: str) -> Callable[[dict], dict]:
    return (lambda d: d["spec"]["rayClusterSpec"]) if kind == "RayJob" else (lambda d: d["spec"])


def _delete(path: list) -> Callable[[dict, Callable], None]:
    def mutate(doc: dict, cluster: Callable) -> None:
        node = cluster(doc)
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


def _set(path: list, value) -> Callable[[dict, Callable], None]:
    def mutate(doc: dict, cluster: Callable) -> None:
        node = cluster(doc)
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def _set_top(key: str, value) -> Callable[[dict, Callable], None]:
    def mutate(doc: dict, cluster: Callable) -> None:
        doc["spec"][key] = value

    return mutate


def _rename(name: str) -> Callable[[dict, Callable], None]:
    def mutate(doc: dict, cluster: Callable) -> None:
        doc["metadata"]["name"] = name

    return mutate


# (name, mutation, field the error must name). Paths are inside the cluster spec (the RayCluster's spec,
# the RayJob's rayClusterSpec).
SCHEMA_BREAKS = [
    ("no head group", _delete(["headGroupSpec"]), "headGroupSpec"),
    ("no head containers", _delete(["headGroupSpec", "template", "spec", "containers"]), "containers"),
    ("no container name", _delete(["headGroupSpec", "template", "spec", "containers", 0, "name"]), "name"),
    ("no worker groupName", _delete(["workerGroupSpecs", 0, "groupName"]), "groupName"),
    ("no worker maxReplicas", _delete(["workerGroupSpecs", 0, "maxReplicas"]), "maxReplicas"),
    ("no worker template", _delete(["workerGroupSpecs", 0, "template"]), "template"),
    ("replicas as text", _set(["workerGroupSpecs", 0, "minReplicas"], "two"), "minReplicas"),
    (
        "rayStartParams value not a string",
        _set(["headGroupSpec", "rayStartParams", "num-cpus"], 0),
        "num-cpus",
    ),
    ("workerGroupSpecs not a list", _set(["workerGroupSpecs"], {"groupName": "gpu"}), "workerGroupSpecs"),
    ("unknown auth mode", _set(["authOptions", "mode"], "password"), "mode"),
    (
        "containerPort as text",
        _set(["headGroupSpec", "template", "spec", "containers", 0, "ports", 0, "containerPort"], "6379"),
        "containerPort",
    ),
]
RAYJOB_SCHEMA_BREAKS = [
    ("ttl as text", _set_top("ttlSecondsAfterFinished", "600"), "ttlSecondsAfterFinished"),
    ("shutdown flag as text", _set_top("shutdownAfterJobFinishes", "yes"), "shutdownAfterJobFinishes"),
    ("entrypoint as list", _set_top("entrypoint", ["python", "-m", "hdet_ray"]), "entrypoint"),
]


def _cases(breaks, kinds):
    return [
        pytest.param(kind, mutate, field, id=f"{kind}-{name}")
        for kind in kinds
        for name, mutate, field in breaks
    ]


def _broken(kind: str, mutate) -> dict:
    doc = copy.deepcopy(one(kind).doc)
    mutate(doc, _cluster(kind))
    return doc


@needs_crds
@pytest.mark.parametrize(
    "kind, mutate, field",
    _cases(SCHEMA_BREAKS, ["RayJob", "RayCluster"]) + _cases(RAYJOB_SCHEMA_BREAKS, ["RayJob"]),
)
def test_schema_rejects_a_broken_manifest(kind, mutate, field):
    assert schema_errors(one(kind).doc) == []
    errors = schema_errors(_broken(kind, mutate))
    assert errors, "the broken manifest still validates"
    assert any(field in e for e in errors), errors


OPERATOR_BREAKS_RAYJOB = [
    ("ttl without shutdown", _set_top("shutdownAfterJobFinishes", False), "ttlSecondsAfterFinished"),
    (
        "clusterSelector as well",
        _set_top("clusterSelector", {"ray.io/cluster": "hdet-cluster"}),
        "exactly one of rayClusterSpec or clusterSelector",
    ),
    (
        "neither cluster nor selector",
        lambda d, c: d["spec"].pop("rayClusterSpec"),
        "exactly one of rayClusterSpec or clusterSelector",
    ),
    ("name of 48 characters", _rename("h" * 48), "at most 47"),
    ("name not DNS-1035", _rename("1-hdet"), "DNS-1035"),
    ("name with capitals", _rename("HDET-digits"), "DNS-1035"),
    (
        "runtimeEnvYAML not YAML",
        _set_top("runtimeEnvYAML", "env_vars: {OMP_NUM_THREADS: [1"),
        "runtimeEnvYAML",
    ),
    ("runtimeEnvYAML not a mapping", _set_top("runtimeEnvYAML", "- a\n- b\n"), "runtimeEnvYAML"),
    ("unknown submission mode", _set_top("submissionMode", "K8sMode"), "submissionMode"),
]
OPERATOR_BREAKS_CLUSTER = [
    ("min above max", _set(["workerGroupSpecs", 0, "minReplicas"], 9), "minReplicas"),
    ("token auth on an old Ray", _set(["rayVersion"], "2.51.0"), "authOptions.mode"),
    (
        "duplicate group names",
        lambda d, c: c(d)["workerGroupSpecs"].append(copy.deepcopy(c(d)["workerGroupSpecs"][0])),
        "unique",
    ),
]


@pytest.mark.parametrize(
    "kind, mutate, expected",
    _cases(OPERATOR_BREAKS_RAYJOB, ["RayJob"])
    + _cases(OPERATOR_BREAKS_CLUSTER, ["RayJob", "RayCluster"])
    + [
        pytest.param(
            "RayJob",
            _set(["workerGroupSpecs", 0, "replicas"], 5),
            "replicas",
            id="RayJob-replicas outside min..max without autoscaling",
        )
    ],
)
def test_operator_checks_reject_a_broken_manifest(kind, mutate, expected):
    assert operator_errors(one(kind).doc) == []
    errors = operator_errors(_broken(kind, mutate))
    assert any(expected in e for e in errors), errors


def test_autoscaling_lets_replicas_leave_min_max_only_when_on():
    doc = copy.deepcopy(one("RayCluster").doc)
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = 9  # above maxReplicas 8
    assert doc["spec"]["enableInTreeAutoscaling"] is True
    assert operator_errors(doc) == []
    doc["spec"]["enableInTreeAutoscaling"] = False
    assert any("replicas" in e for e in operator_errors(doc))
