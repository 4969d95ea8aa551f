"""docs/deploy.md names every command of the way from zero to a finished job, each file it names exists,
every deploy file is named, and its `ray job submit` runs the RayJob's entrypoint."""

from __future__ import annotations

import re
import shlex

from k8s_manifests import DEPLOY, REPO, containers, manifests, one

DOC = REPO / "docs" / "deploy.md"
PATH = re.compile(r"(?<![\w/.-])((?:deploy|examples|docs|tests|hdet_ray|service)/[\w./-]*\w|\.dockerignore)")


def _text() -> str:
    return DOC.read_text()


def _commands() -> list[str]:
    """The lines of the doc's bash blocks, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", _text(), re.DOTALL)
    return [
        line.strip()
        for block in blocks
        for line in block.replace("\\\n", " ").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_every_file_the_doc_names_exists():
    named = set(PATH.findall(_text()))
    assert named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert missing == []


def test_every_deploy_file_is_named():
    named = set(PATH.findall(_text()))
    files = {str(p.relative_to(REPO)) for p in DEPLOY.rglob("*") if p.is_file()} | {".dockerignore"}
    assert files - named == set()


def test_the_doc_names_every_step():
    commands = "\n".join(_commands())
    for step in (
        "docker build -f deploy/docker/Dockerfile --build-arg VARIANT=gpu",
        "docker push",
        "helm repo add kuberay",
        "helm install kuberay-operator kuberay/kuberay-operator",
        "kubectl create secret generic",
        "kubectl get rayjob hdet-digits -w",
        "kubectl logs -f job/",
        "kubectl apply -f",
        "kubectl get raycluster hdet-cluster",
        "kubectl port-forward",
        "ray job submit",
        "kubectl rollout status deployment/hdet-service",
        "python -m pytest",
    ):
        assert step in commands, step


def test_each_manifest_is_applied():
    commands = "\n".join(_commands())
    for m in manifests():
        path = str(m.path.relative_to(REPO))
        assert re.search(
            rf"kubectl apply (-f \S+ )*-f {re.escape(path)}|{re.escape(path)} \| kubectl apply", commands
        ), path


def test_the_operator_version_has_auth_secret_names():
    (version,) = re.findall(r"helm install kuberay-operator \S+ --version (\S+)", "\n".join(_commands()))
    assert tuple(int(x) for x in version.split(".")) >= (1, 6, 0)


def test_the_images_built_are_the_images_the_manifests_run():
    built = set(re.findall(r"docker build [^\n]*-t (\S+)", "\n".join(_commands())))
    used = {
        c["image"]
        for m in manifests()
        if m.kind in ("RayJob", "RayCluster", "Deployment")
        for _, c, _ in containers(m.doc)
    }
    assert used <= built


def test_ray_job_submit_runs_the_rayjobs_entrypoint_from_the_checkout():
    (submit,) = [c for c in _commands() if c.startswith("ray job submit")]
    argv = shlex.split(submit)
    assert "--working-dir" in argv and argv[argv.index("--working-dir") + 1] == "."
    entrypoint = argv[argv.index("--") + 1 :]
    assert entrypoint == shlex.split(one("RayJob").doc["spec"]["entrypoint"])
