"""The deployment files in deploy/ agree with weir itself, checked without a cluster.

The Kubernetes manifests are rendered as `kubectl apply -k` would render them (`kubectl
kustomize`, or the files kustomization.yaml lists where kubectl is missing) and checked
against weir's own command-line parser and option registry: every container runs a valid
`weir` command, the ConfigMap's weir.yaml loads, the ports of Services, containers and
probes are the configured ones, and no secret is on a command line or in the ConfigMap.
The systemd units and their weir.yaml get the same checks, the container image definition
the static ones (building it needs a container engine: tests/integration/
test_container_image.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from weir.cli.main import build_parser
from weir.core.config import Configuration, Option, all_options

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
SYSTEMD = REPO / "deploy" / "systemd"
CONTAINERFILE = REPO / "deploy" / "container" / "Containerfile"

#: Options whose values must never be on a command line or in a ConfigMap.
SECRET_KEYS = ("security.auth.token", "s3.access-key", "s3.secret-key")
#: Options that differ per TaskExecutor pod, set from the pod's fields.
PER_POD = {"taskmanager.host": "status.podIP", "taskmanager.resource-id": "metadata.name"}
#: The oldest Kubernetes release the manifests are written for.
KUBERNETES_VERSION = "1.28.0"


# -- rendering -----------------------------------------------------------------------------


def render_with_kubectl(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, f"kubectl kustomize {directory} failed: {out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def render_from_files(directory: Path) -> list[dict[str, Any]]:
    """The resources kustomization.yaml lists and the ConfigMaps it generates, in its
    namespace: what kubectl renders, less name hashes, labels and image tags."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        docs += [doc for doc in yaml.safe_load_all((directory / resource).read_text()) if doc]
    for generated in kustomization.get("configMapGenerator", []):
        data = {Path(name).name: (directory / name).read_text() for name in generated["files"]}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": generated["name"]}, "data": data})
    namespace = kustomization.get("namespace")
    for doc in docs:
        if namespace and doc["kind"] != "Namespace":
            doc["metadata"]["namespace"] = namespace
    return docs


def render(directory: Path = KUBERNETES) -> list[dict[str, Any]]:
    if shutil.which("kubectl"):
        return render_with_kubectl(directory)
    return render_from_files(directory)


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return render()


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind
             and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def containers(workload: dict[str, Any], init: bool = True) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return list(spec["containers"]) + (list(spec.get("initContainers", [])) if init else [])


def all_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for workload in workloads(docs):
        for container in containers(workload):
            yield workload, container


def configmap_file(docs: list[dict[str, Any]], tmp_path: Path) -> Path:
    """The ConfigMap's weir.yaml, written out as the pods see it."""
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    path = tmp_path / "weir.yaml"
    path.write_text(configmap["data"]["weir.yaml"])
    return path


def raw_options(path: Path) -> dict[str, Any]:
    """A weir.yaml's keys and values as written (flat keys), without validating them."""
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def option(key: str) -> Option[Any]:
    declared = all_options().get(key)
    assert declared is not None, f"'{key}' is not a weir option (weir.core.config.all_options)"
    return declared


def value(conf: dict[str, Any], key: str) -> Any:
    """``key``'s value in a weir.yaml, parsed by its option (the default when absent)."""
    declared = option(key)
    return declared.parse(conf[key]) if key in conf else declared.default_value()


def single_port(conf: dict[str, Any], key: str) -> int:
    text = str(value(conf, key))
    assert text.isdigit() and int(text) > 0, \
        f"{key} is {text!r}: a container needs one fixed port, not 0 or a range"
    return int(text)


# -- the container image definition ---------------------------------------------------------


def containerfile_stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by stage name, in order."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if match:
            current = stages.setdefault(match.group(1), [])
        if current is not None:
            current.append(line)
    return stages


def image_entrypoint() -> list[str]:
    entrypoints = [line for lines in containerfile_stages().values() for line in lines
                   if line.startswith("ENTRYPOINT")]
    assert len(entrypoints) == 1, entrypoints
    return list(json.loads(entrypoints[0].removeprefix("ENTRYPOINT")))


def image_user() -> str:
    users = [line.split()[1] for line in containerfile_stages()["runtime"]
             if line.startswith("USER")]
    return users[-1]


def test_the_image_has_a_daemon_and_a_client_target_running_weir_as_a_user():
    stages = containerfile_stages()
    assert list(stages) == ["build", "runtime", "client", "daemon"]
    # The last stage is what `docker build` makes without --target: the daemon image.
    assert stages["daemon"][0].split()[1] == "runtime"
    assert stages["client"][0].split()[1] == "runtime"
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", CONTAINERFILE.read_text())
    assert base is not None and base.group(1).startswith("python:3.11-slim")
    assert any("pip install ." in line for line in stages["build"])
    assert image_entrypoint() == ["weir"]
    uid = image_user().split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "the images run as a non-root user"
    assert [line for line in stages["client"] if line.startswith("USER")][-1] == \
        f"USER {image_user()}", "the client stage drops back to the unprivileged user"
    client = " ".join(stages["client"])
    assert "openjdk-17-jre-headless" in client, "from_spark() needs Java 17 on the client"
    daemon = " ".join(stages["runtime"] + stages["daemon"])
    assert "openjdk" not in daemon and "/var/lib/weir" in daemon and "/etc/weir" in daemon


def test_the_build_context_leaves_out_local_and_test_files():
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for must in (".venv", "build", "tests", ".git"):
        assert must in ignored
    # What `pip install .` needs stays in: pyproject, the README it names, every package.
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = {"pyproject.toml", "README.md",
              *(d.split("/")[0] for d in pyproject["tool"]["setuptools"]["package-dir"].values())}
    assert needed.isdisjoint(ignored)
    assert not any(pattern.startswith("!") for pattern in ignored)


# -- Kubernetes -----------------------------------------------------------------------------


def test_the_manifests_match_the_kubernetes_schemas(manifests: list[dict[str, Any]]):
    # Strict: a misspelt field (podManagmentPolicy) is an error, not silently dropped.
    for doc in manifests:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_rendering_from_the_files_finds_what_kubectl_renders():
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not on PATH: only the files kustomization.yaml lists are read")
    by_kubectl = {(d["kind"], d["metadata"]["name"].removeprefix("weir-config-")
                   if d["kind"] == "ConfigMap" else d["metadata"]["name"])
                  for d in render_with_kubectl(KUBERNETES)}
    by_files = {(d["kind"], d["metadata"]["name"].removeprefix("weir-config-")
                 if d["kind"] == "ConfigMap" else d["metadata"]["name"])
                for d in render_from_files(KUBERNETES)}
    # kubectl suffixes the generated ConfigMap's name with a hash of its contents.
    assert {(k, n) for k, n in by_kubectl if k != "ConfigMap"} == \
        {(k, n) for k, n in by_files if k != "ConfigMap"}
    assert sorted(d["kind"] for d in render_with_kubectl(KUBERNETES)) == \
        sorted(d["kind"] for d in render_from_files(KUBERNETES))


def weir_argv(container: dict[str, Any]) -> list[str]:
    """The container's command line, the image's entrypoint where it sets no command."""
    return [*container.get("command", image_entrypoint()), *container.get("args", [])]


def parse_weir(argv: list[str]) -> argparse.Namespace:
    assert Path(argv[0]).name == "weir", f"not a weir command: {argv}"
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit as exit_:
        raise AssertionError(f"weir refuses the command line {argv} (exit {exit_.code})") \
            from None


def test_every_container_runs_a_valid_weir_daemon_command(manifests: list[dict[str, Any]]):
    commands = {}
    for workload, container in all_containers(manifests):
        args = parse_weir(weir_argv(container))
        assert args.command in ("jobmaster", "taskexecutor")
        commands[workload["kind"]] = args.command
        for pair in args.dynamic:
            option(pair.partition("=")[0])
        # --conf names the file of the ConfigMap mounted at its directory.
        conf = Path(args.conf)
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        mounted = [volumes[name]["configMap"]["name"] for name, path in mounts.items()
                   if path == str(conf.parent) and "configMap" in volumes[name]]
        assert len(mounted) == 1, f"{conf} is on no mounted ConfigMap"
        configmap = one(manifests, "ConfigMap", mounted[0])
        assert conf.name in configmap["data"]
    assert commands == {"Deployment": "jobmaster", "StatefulSet": "taskexecutor"}


def test_the_configmap_weir_yaml_loads_and_validates(manifests: list[dict[str, Any]],
                                                     tmp_path: Path):
    Configuration.load(configmap_file(manifests, tmp_path))


def test_services_containers_and_probes_use_the_configured_ports(
        manifests: list[dict[str, Any]], tmp_path: Path):
    conf = raw_options(configmap_file(manifests, tmp_path))
    metrics = single_port(conf, "metrics.reporter.prom.port")
    expected = {
        "Deployment": {"rpc": single_port(conf, "jobmaster.rpc.port"), "metrics": metrics,
                       "rest": single_port(conf, "rest.port")},
        "StatefulSet": {"rpc": single_port(conf, "taskmanager.rpc.port"),
                        "data": single_port(conf, "taskmanager.data.port"),
                        "metrics": metrics},
    }
    for workload in workloads(manifests):
        (container,) = containers(workload, init=False)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == expected[workload["kind"]], workload["metadata"]["name"]

        def resolve(port: int | str, ports: dict[str, int] = ports) -> int:
            return ports[port] if isinstance(port, str) else port

        probes = {kind: container[kind]["httpGet"]
                  for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
        assert {kind: (probe["path"], resolve(probe["port"])) for kind, probe in probes.items()} \
            == {"startupProbe": ("/healthz", metrics), "livenessProbe": ("/healthz", metrics),
                "readinessProbe": ("/readyz", metrics)}
        # The Service in front of the pods: same port numbers as the containers, so an
        # address built from the configuration (HOST:jobmaster.rpc.port) works through it.
        labels = workload["spec"]["template"]["metadata"]["labels"]
        (service,) = [s for s in manifests if s["kind"] == "Service"
                      and s["spec"]["selector"].items() <= labels.items()]
        assert {p["name"]: (p["port"], resolve(p["targetPort"]))
                for p in service["spec"]["ports"]} == \
            {name: (port, port) for name, port in ports.items()}
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(metrics)


def test_taskexecutors_reach_the_jobmaster_at_its_service(manifests: list[dict[str, Any]],
                                                          tmp_path: Path):
    conf = raw_options(configmap_file(manifests, tmp_path))
    service = one(manifests, "Service", "weir-jobmaster")
    (rpc,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "rpc"]
    (container,) = containers(one(manifests, "StatefulSet"), init=False)
    args = parse_weir(weir_argv(container))
    assert args.jobmaster == f"{service['metadata']['name']}:{rpc}"
    assert args.jobmaster == \
        f"{value(conf, 'jobmaster.rpc.address')}:{value(conf, 'jobmaster.rpc.port')}"
    assert value(conf, "jobmaster.rpc.bind-host") == "0.0.0.0"
    assert value(conf, "taskmanager.bind-host") == "0.0.0.0"
    assert value(conf, "metrics.reporter.prom.host") == "0.0.0.0"


def test_network_policies_open_each_port_to_its_peers_only(manifests: list[dict[str, Any]]):
    component = "app.kubernetes.io/component"
    ports = {w["spec"]["template"]["metadata"]["labels"][component]:
             {p["name"] for c in containers(w, init=False) for p in c["ports"]}
             for w in workloads(manifests)}
    opened: dict[str, dict[str, set[str]]] = {}
    for policy in (d for d in manifests if d["kind"] == "NetworkPolicy"):
        target = policy["spec"]["podSelector"]["matchLabels"][component]
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        for rule in policy["spec"]["ingress"]:
            peers = {peer["podSelector"]["matchLabels"][component]
                     for peer in rule.get("from", [])} or {"anyone"}
            for port in rule["ports"]:
                assert port["port"] in ports[target], f"{target} has no port {port['port']}"
                opened.setdefault(target, {}).setdefault(port["port"], set()).update(peers)
    assert opened == {
        "jobmaster": {"rpc": {"anyone"}, "metrics": {"anyone"}, "rest": {"anyone"}},
        "taskexecutor": {"rpc": {"jobmaster"}, "data": {"taskexecutor"},
                         "metrics": {"anyone"}},
    }


def test_no_secret_is_on_a_command_line_or_in_the_configmap(manifests: list[dict[str, Any]]):
    secret = one(manifests, "Secret", "weir-secrets")
    values = list(secret["stringData"].values())
    assert all("REPLACE-ME" in v for v in values), "example secrets are marked to replace"
    for _, container in all_containers(manifests):
        line = " ".join([*container.get("command", []), *container.get("args", [])])
        for text in (*SECRET_KEYS, *values):
            assert text not in line, f"{container['name']} has a secret on its command line"
    for configmap in (d for d in manifests if d["kind"] == "ConfigMap"):
        for name, text in configmap["data"].items():
            keys = yaml.safe_load(text) if name.endswith(".yaml") else {}
            assert set(keys).isdisjoint(SECRET_KEYS), f"a secret key in {name}"
            assert not any(v in text for v in values), f"a secret value in {name}"


def test_secrets_and_per_pod_values_come_from_the_environment(manifests: list[dict[str, Any]],
                                                              tmp_path: Path):
    by_env_var = {opt.env_var: opt.key for opt in all_options().values()}
    secret = one(manifests, "Secret", "weir-secrets")
    conf = raw_options(configmap_file(manifests, tmp_path))
    for workload, container in all_containers(manifests):
        spec = workload["spec"]["template"]["spec"]
        # Kubernetes's service links (WEIR_JOBMASTER_PORT=tcp://...) share weir's prefix.
        assert spec.get("enableServiceLinks") is False
        assert "envFrom" not in container
        env = {e["name"]: e for e in container.get("env", [])}
        for name in env:
            # An env var that names no option would be ignored without a word.
            assert name in by_env_var, f"{name} is the variable of no weir option"
        for key in SECRET_KEYS:
            ref = env[option(key).env_var]
            assert "value" not in ref
            assert ref["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
            assert ref["valueFrom"]["secretKeyRef"]["key"] in secret["stringData"]
        if workload["kind"] == "StatefulSet":
            for key, field in PER_POD.items():
                assert env[option(key).env_var]["valueFrom"]["fieldRef"]["fieldPath"] == field
                # A value in the file would take precedence over the variable.
                assert key not in conf, f"{key} in weir.yaml hides the pod's own value"


def test_taskexecutors_keep_their_id_and_working_directory(manifests: list[dict[str, Any]],
                                                           tmp_path: Path):
    conf = raw_options(configmap_file(manifests, tmp_path))
    statefulset = one(manifests, "StatefulSet")
    service = one(manifests, "Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    (container,) = containers(statefulset, init=False)
    working_dir = value(conf, "process.taskmanager.working-dir")
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}[
        claim["metadata"]["name"]] == working_dir
    assert value(conf, "state.backend.local-recovery") is True
    # The pod gets the time to cancel its tasks once it has handed them back.
    grace = statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > value(conf, "task.cancellation.timeout")


def test_one_jobmaster_with_high_availability_and_checkpoints_on_s3(
        manifests: list[dict[str, Any]], tmp_path: Path):
    conf = raw_options(configmap_file(manifests, tmp_path))
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    # A rolling update would run two JobMasters on one HA storage directory.
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert value(conf, "high-availability.type") == "file"
    for key in ("high-availability.storageDir", "state.checkpoints.dir",
                "execution.checkpointing.savepoint-dir"):
        assert str(value(conf, key)).startswith("s3://"), key


def test_every_container_has_resources_and_runs_unprivileged(manifests: list[dict[str, Any]]):
    uid = int(image_user().split(":")[0])
    for workload, container in all_containers(manifests):
        for kind in ("requests", "limits"):
            assert set(container["resources"][kind]) >= {"cpu", "memory"}
        pod = workload["spec"]["template"]["spec"]["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == uid
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


# -- systemd --------------------------------------------------------------------------------


def unit_settings(path: Path) -> list[tuple[str, str]]:
    """A unit file's (key, value) settings of its [Service] section, in order."""
    settings, section = [], ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _, text = line.partition("=")
            settings.append((key.strip(), text.strip()))
    return settings


UNITS = {"jobmaster": SYSTEMD / "weir-jobmaster.service",
         "taskexecutor": SYSTEMD / "weir-taskexecutor.service"}


@pytest.mark.parametrize("daemon", sorted(UNITS))
def test_a_unit_runs_a_valid_weir_command_with_its_secrets_in_a_file(daemon: str):
    settings = unit_settings(UNITS[daemon])
    (exec_start,) = [text for key, text in settings if key == "ExecStart"]
    argv = shlex.split(exec_start)
    args = parse_weir(argv)
    assert args.command == daemon and args.conf == "/etc/weir/weir.yaml"
    for pair in args.dynamic:
        option(pair.partition("=")[0])
    assert ("EnvironmentFile", "/etc/weir/weir.env") in settings
    by_env_var = {opt.env_var for opt in all_options().values()}
    for key, text in settings:
        if key == "Environment":
            assert text.partition("=")[0] in by_env_var, text
        for secret in SECRET_KEYS:
            assert secret not in text and option(secret).env_var not in text, \
                f"{secret} set in {UNITS[daemon].name} itself, not its EnvironmentFile"


def test_the_units_environment_file_example_holds_the_secrets():
    names = [line.partition("=")[0] for line in (SYSTEMD / "weir.env.example").read_text()
             .splitlines() if line and not line.startswith("#")]
    assert sorted(names) == sorted(option(key).env_var for key in SECRET_KEYS)


def test_the_units_weir_yaml_loads_and_validates():
    Configuration.load(SYSTEMD / "weir.yaml")


def test_the_taskexecutor_unit_reaches_the_configured_jobmaster():
    conf = raw_options(SYSTEMD / "weir.yaml")
    (exec_start,) = [text for key, text in unit_settings(UNITS["taskexecutor"])
                     if key == "ExecStart"]
    args = parse_weir(shlex.split(exec_start))
    assert args.jobmaster == \
        f"{value(conf, 'jobmaster.rpc.address')}:{value(conf, 'jobmaster.rpc.port')}"
    for key in ("jobmaster.rpc.port", "taskmanager.rpc.port", "taskmanager.data.port",
                "metrics.reporter.prom.port"):
        single_port(conf, key)
    for key in SECRET_KEYS:
        assert key not in conf


def test_systemd_accepts_the_units(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # systemd checks that ExecStart's program exists: point it at this checkout's weir.
    weir = shutil.which("weir", path=str(Path(sys.executable).parent))
    assert weir is not None
    copies = []
    for path in UNITS.values():
        copy = tmp_path / path.name
        copy.write_text(path.read_text().replace("/opt/weir/bin/weir", weir))
        copies.append(str(copy))
    out = subprocess.run([analyze, "verify", *copies], capture_output=True, text=True,
                         timeout=60, check=False)
    # Unknown keys are only warned about: any output is a finding.
    assert (out.returncode, out.stdout + out.stderr) == (0, "")
