"""The deploy/ files agree with each other and with the package: names, labels and references resolve,
images match the pinned Ray, the spec in the ConfigMap is the example spec, workers map to replicas.
No cluster needed (Kubernetes itself cannot run here)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath
from urllib.parse import urlparse

import yaml
from k8s_manifests import (
    DEPLOY,
    PART_OF,
    REPO,
    containers,
    entrypoint_argv,
    manifest_files,
    manifests,
    one,
    pod_specs,
    ray_pin,
)

from hdet_ray.spec import JobSpec

EXPECTED = {
    ("RayJob", "hdet-digits"),
    ("RayCluster", "hdet-cluster"),
    ("ConfigMap", "hdet-spec"),
    ("PersistentVolumeClaim", "hdet-runs"),
    ("Deployment", "hdet-service"),
    ("Service", "hdet-service"),
    ("PersistentVolumeClaim", "hdet-service-data"),
}
# What the ConfigMap's spec may change from examples/specs/digits.yaml, and why: GPUs and shared storage.
CLUSTER_SETTINGS = {"use_gpu": True, "storage_path": "/mnt/runs"}
DEPLOY_DOC = REPO / "docs" / "deploy.md"


def test_every_manifest_parses_and_names_what_it_is():
    assert manifest_files(), "no manifests under deploy/"
    for path in manifest_files():
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs, f"{path} holds no document"
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
            assert doc["metadata"].get("name"), path
    assert {(m.kind, m.name) for m in manifests()} == EXPECTED


def test_labels_are_consistent():
    for m in manifests():
        labels = m.doc["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/name") == PART_OF, m
        assert labels.get("app.kubernetes.io/part-of") == PART_OF, m
        assert labels.get("app.kubernetes.io/component"), m


def _references(doc: dict) -> set[tuple[str, str, str | None, bool]]:
    """(kind, name, key, optional) of every ConfigMap, PVC and Secret a manifest's pods use."""
    refs = set()
    cluster = doc["spec"].get("rayClusterSpec", doc["spec"])
    if secret := (cluster.get("authOptions") or {}).get("secretName"):
        refs.add(("Secret", secret, "auth_token", False))
    for _, pod in pod_specs(doc):
        for volume in pod.get("volumes") or []:
            if "configMap" in volume:
                refs.add(("ConfigMap", volume["configMap"]["name"], None, False))
            if "persistentVolumeClaim" in volume:
                refs.add(("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"], None, False))
        for container in pod["containers"]:
            for env in container.get("env") or []:
                if ref := (env.get("valueFrom") or {}).get("secretKeyRef"):
                    refs.add(("Secret", ref["name"], ref["key"], bool(ref.get("optional"))))
    return refs


def _pod_owners():
    return [m for m in manifests() if m.kind in ("RayJob", "RayCluster", "Deployment")]


def test_every_configmap_and_claim_used_is_defined():
    defined = {(m.kind, m.name) for m in manifests()}
    for m in _pod_owners():
        for kind, name, _, _ in _references(m.doc):
            if kind != "Secret":
                assert (kind, name) in defined, f"{m} uses {kind} {name}, which no manifest defines"


def test_every_secret_used_is_created_in_the_docs_with_its_keys():
    # Secrets are not committed: docs/deploy.md creates each with `kubectl create secret generic`.
    text = DEPLOY_DOC.read_text()
    created = {}
    for name, args in re.findall(r"kubectl create secret generic ([a-z0-9-]+)((?:[^\n]|\\\n)*)", text):
        created.setdefault(name, set()).update(re.findall(r"--from-literal=([A-Za-z0-9_.-]+)=", args))
    secrets = {r for m in _pod_owners() for r in _references(m.doc) if r[0] == "Secret"}
    assert {name for _, name, _, _ in secrets} == {"hdet-ray-auth", "hdet-service"}
    for _, name, key, optional in secrets:
        assert name in created, f"docs/deploy.md never creates the Secret {name}"
        assert optional or key in created[name], f"docs/deploy.md creates {name} without the key {key}"


def test_every_volume_mount_names_a_volume_of_its_pod():
    for m in _pod_owners():
        for group, container, pod in containers(m.doc):
            volumes = {v["name"] for v in pod.get("volumes") or []}
            for mount in container.get("volumeMounts") or []:
                assert mount["name"] in volumes, f"{m} {group}: mount {mount['name']} has no volume"


def test_the_service_selects_the_deployments_pods():
    deployment, service = one("Deployment").doc, one("Service").doc
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    container_ports = {
        p["name"]: p["containerPort"] for _, c, _ in containers(deployment) for p in c["ports"]
    }
    assert port["targetPort"] in container_ports


def _env(doc: dict) -> dict[str, dict]:
    ((_, container, _),) = containers(doc)
    return {e["name"]: e for e in container["env"]}


def test_the_service_points_at_the_rayclusters_dashboard_with_its_token():
    cluster = one("RayCluster").doc
    env = _env(one("Deployment").doc)
    assert env["RAY_ADDRESS"]["value"] == f"http://{cluster['metadata']['name']}-head-svc:8265"
    head_ports = {
        p["name"]: p["containerPort"] for g, c, _ in containers(cluster) if g == "head" for p in c["ports"]
    }
    assert head_ports["dashboard"] == 8265
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    token = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (token["name"], token["key"]) == (cluster["spec"]["authOptions"]["secretName"], "auth_token")
    assert {"HDET_TOKEN", "HDET_DATA_DIR", "HDET_DATABASE_URL"} <= env.keys()


def test_the_public_url_is_the_service_address_and_the_data_dir_is_the_volume():
    deployment, service = one("Deployment").doc, one("Service").doc
    env = _env(deployment)
    url = urlparse(env["HDET_PUBLIC_URL"]["value"])
    assert (url.hostname, url.port) == (service["metadata"]["name"], service["spec"]["ports"][0]["port"])
    ((_, container, _),) = containers(deployment)
    mounts = {mnt["mountPath"] for mnt in container["volumeMounts"]}
    assert env["HDET_DATA_DIR"]["value"] in mounts


def _dockerfile() -> str:
    return (DEPLOY / "docker" / "Dockerfile").read_text()


def _image_for(variant: str) -> str:
    """The Dockerfile's base image with its build arguments' defaults, VARIANT set to `variant`."""
    text = _dockerfile()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    args["VARIANT"] = variant
    (base,) = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)


def test_the_image_is_the_pinned_ray_image_in_a_cpu_and_a_gpu_variant():
    pin = ray_pin()
    assert pin == "2.60.0"
    assert _image_for("cpu") == f"rayproject/ray:{pin}-py311-cpu"
    assert _image_for("gpu") == f"rayproject/ray:{pin}-py311-gpu"
    assert '"/tmp/hdet-ray[ray,service]"' in _dockerfile()


def test_every_image_and_ray_version_matches_the_pin():
    pin = ray_pin()
    for m in _pod_owners():
        for group, container, _ in containers(m.doc):
            gpu = "nvidia.com/gpu" in (container.get("resources") or {}).get("limits", {})
            image = container["image"]
            assert re.fullmatch(rf"hdet-ray:{re.escape(pin)}-py311-(cpu|gpu)", image), f"{m} {group}: {image}"
            if gpu:
                assert image.endswith("-gpu"), f"{m} {group} asks for a GPU but runs {image}"
        if m.kind != "Deployment":
            cluster = m.doc["spec"].get("rayClusterSpec", m.doc["spec"])
            assert cluster["rayVersion"] == pin, m


def _ignored(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(name, p.removeprefix("**/")) for p in patterns)


def test_dockerignore_keeps_the_package_and_drops_the_rest():
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in ("pyproject.toml", "README.md", "hdet_ray", "service", "examples"):
        assert not _ignored(needed, patterns), needed
    for dropped in (".git", "tests", "runs", "__pycache__", "hdet_ray.egg-info"):
        assert _ignored(dropped, patterns), dropped


def _configmap_spec() -> tuple[str, dict]:
    ((key, text),) = one("ConfigMap").doc["data"].items()
    return key, yaml.safe_load(text)


def test_the_configmap_spec_is_the_example_spec_with_the_cluster_settings():
    key, spec = _configmap_spec()
    example = yaml.safe_load((REPO / "examples" / "specs" / key).read_text())
    changed = {k: v for k, v in spec.items() if example.get(k) != v}
    assert changed == CLUSTER_SETTINGS
    assert example.keys() <= spec.keys()
    JobSpec.parse(spec, "ConfigMap hdet-spec")
    JobSpec.parse(example, "examples/specs/" + key)


def test_gpu_workers_map_to_replicas():
    _, spec = _configmap_spec()
    cluster = one("RayJob").doc["spec"]["rayClusterSpec"]
    assert spec["use_gpu"] is True
    pods = 0
    for group in cluster["workerGroupSpecs"]:
        assert group["minReplicas"] == group["replicas"] == group["maxReplicas"], "a fixed-size group"
        (container,) = group["template"]["spec"]["containers"]
        assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1", "one replica per pod"
        pods += group["replicas"]
    assert pods == spec["replicas"]
    assert cluster.get("enableInTreeAutoscaling", False) is False


def test_the_entrypoints_spec_path_resolves_to_the_configmap_in_the_head_pod():
    rayjob = one("RayJob").doc
    argv = entrypoint_argv(rayjob)
    assert argv[:4] == ["python", "-m", "hdet_ray", "run"] and len(argv) == 5
    path = PurePosixPath(argv[4])
    assert not path.is_absolute()
    assert (REPO / path).is_file(), "the same command must run from the repository root"
    ((_, head, pod),) = [(g, c, p) for g, c, p in containers(rayjob) if g == "head"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    resolved = PurePosixPath(head["workingDir"]) / path
    mount = next(mnt for mnt in head["volumeMounts"] if PurePosixPath(mnt["mountPath"]) == resolved.parent)
    assert volumes[mount["name"]]["configMap"]["name"] == one("ConfigMap").name
    assert resolved.name in one("ConfigMap").doc["data"]


def test_run_storage_is_mounted_on_every_ray_pod():
    _, spec = _configmap_spec()
    for m in manifests():
        if m.kind in ("RayJob", "RayCluster"):
            for group, container, _ in containers(m.doc):
                mounts = {mnt["mountPath"] for mnt in container.get("volumeMounts") or []}
                assert spec["storage_path"] in mounts, f"{m} {group} lacks {spec['storage_path']}"


def test_runtime_env_sets_only_what_ray_accepts():
    runtime_env = yaml.safe_load(one("RayJob").doc["spec"]["runtimeEnvYAML"])
    assert runtime_env.keys() <= {"env_vars", "pip", "working_dir", "py_modules", "config", "conda", "uv"}
    assert all(isinstance(v, str) for v in runtime_env["env_vars"].values())
