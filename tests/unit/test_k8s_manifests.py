"""The Kubernetes manifests render (`kustomize build`, no cluster here) and say what the settings say: node
counts, replication factor and consistency, Ignite backups, MinIO's erasure set, client ranks and pods; what
the pods read (ConfigMap + Secret) parses back into the same settings; every reference resolves."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from workbench import cli_k8s
from workbench.config import TOPOLOGY_FIELDS, Settings, get_settings
from workbench.errors import WorkbenchError
from workbench.stack.cassandra import Cassandra
from workbench.stack.ignite import Ignite
from workbench.stack.k8s import BASE, SECRET_FILES, K8sOptions, kustomize_binary, render, write_overlay

IP_FINDERS = "org.apache.ignite.spi.discovery.tcp.ipfinder"
LOGINS = {"s3_access_key": "wb-k8s-test", "s3_secret_key": "s3-secret-of-the-test",
          "cassandra_username": "workbench", "cassandra_password": "cassandra-secret-of-the-test",
          "ignite_username": "workbench", "ignite_password": "ignite-secret-of-the-test"}


def cluster_settings(**topology) -> Settings:
    values = {"stack": "external", "cassandra_nodes": 3, "cassandra_replication_factor": 3,
              "cassandra_consistency": "QUORUM", "ignite_nodes": 3, "ignite_backups": 1, "ignite_persistence": True,
              "s3_nodes": 4, "s3_drives_per_node": 2, "client_ranks": 4, **topology}
    return Settings(_env_file=None, **{**LOGINS, **values})


def by_kind(docs: list[dict]) -> dict[tuple[str, str], dict]:
    """(kind, name without kustomize's hash suffix) -> object."""
    found = {}
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] in ("ConfigMap", "Secret"):
            name = name.rsplit("-", 1)[0]
        found[(doc["kind"], name)] = doc
    return found


def decoded(secret: dict) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Iterator[tuple[Settings, Path, dict]]:
    settings = cluster_settings()
    out = write_overlay(settings, tmp_path_factory.mktemp("k8s") / "overlay",
                        K8sOptions(namespace="bench", image="registry.example/workbench:1.2", ranks_per_pod=2,
                                   triton_gpus=1, loader="cassandra", dataset="imagenet-val"))
    yield settings, out, by_kind(render(settings, out))


def test_storage_nodes_replication_and_erasure_set_follow_the_settings(rendered):
    settings, _, objects = rendered
    dc = objects[("CassandraDatacenter", "dc1")]["spec"]
    assert dc["size"] == settings.cassandra_nodes and dc["serverType"] == "cassandra"
    assert dc["serverVersion"] == Cassandra.version  # the same Cassandra as the local stack
    assert dc["config"]["cassandra-yaml"]["authenticator"] == "PasswordAuthenticator"
    pool = objects[("Tenant", "workbench")]["spec"]["pools"][0]
    assert (pool["servers"], pool["volumesPerServer"]) == (settings.s3_nodes, settings.s3_drives_per_node)
    ignite = objects[("StatefulSet", "ignite")]
    assert ignite["spec"]["replicas"] == settings.ignite_nodes
    assert ignite["spec"]["template"]["spec"]["containers"][0]["image"] == f"apacheignite/ignite:{Ignite.version}"
    env = objects[("ConfigMap", "workbench-settings")]["data"]
    assert env["WORKBENCH_CASSANDRA_REPLICATION_FACTOR"] == "3" and env["WORKBENCH_CASSANDRA_CONSISTENCY"] == "QUORUM"
    assert env["WORKBENCH_IGNITE_BACKUPS"] == "1" and env["WORKBENCH_IGNITE_PERSISTENCE"] == "true"


def test_the_pods_read_back_the_same_settings(rendered, monkeypatch):
    settings, _, objects = rendered
    env = {**objects[("ConfigMap", "workbench-settings")]["data"],
           **decoded(objects[("Secret", "workbench-credentials")])}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    inside = Settings(_env_file=None)
    assert inside.stack == "external"
    assert {f: getattr(inside, f) for f in TOPOLOGY_FIELDS if f not in ("launcher", "node_network")} == \
        {f: getattr(settings, f) for f in TOPOLOGY_FIELDS if f not in ("launcher", "node_network")}
    assert inside.secrets() == settings.secrets()
    assert inside.cassandra_contact_points == ["workbench-dc1-service:9042"]
    assert inside.ignite_addresses == [f"ignite-{k}.ignite:10800" for k in range(settings.ignite_nodes)]
    assert inside.s3_endpoint() == "http://minio" and inside.triton_urls == ["http://triton:8000"]
    services = {name for kind, name in objects if kind == "Service"}
    assert {"ignite", "triton", "workbench-clients"} <= services  # cass-operator and the Tenant make the others


def test_client_job_runs_the_ranks_across_pods(rendered):
    settings, _, objects = rendered
    job = objects[("Job", "workbench-clients")]
    pods = settings.client_ranks // 2
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == pods
    pod = job["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[:3] == ["workbench", "bench", "clients"]
    options = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
    assert "--direct" in args  # no toxiproxy in the cluster
    assert options["--ranks"] == str(settings.client_ranks) and options["--nnodes"] == str(pods)
    assert options["--loader"] == "cassandra" and options["--dataset"] == "imagenet-val"
    host = options["--rdzv-endpoint"].split(":")[0]
    assert host == f"{job['metadata']['name']}-0.{pod['subdomain']}"  # pod 0 of the Job, through its service
    assert pod["initContainers"][0]["args"][:3] == ["workbench", "stack", "external-bootstrap"]
    assert {c["image"] for c in pod["containers"] + pod["initContainers"]} == {"registry.example/workbench:1.2"}


def test_every_reference_resolves_and_logins_reach_the_operators(rendered):
    objects = rendered[2]
    names = {(kind, doc["metadata"]["name"]) for (kind, _), doc in objects.items()}
    referenced = set()
    for doc in objects.values():
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for source in container.get("envFrom", []):
                kind = "ConfigMap" if "configMapRef" in source else "Secret"
                referenced.add((kind, (source.get("configMapRef") or source.get("secretRef"))["name"]))
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    referenced.add(("ConfigMap", ref["configMapKeyRef"]["name"]))
                if "secretKeyRef" in ref:
                    referenced.add(("Secret", ref["secretKeyRef"]["name"]))
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                referenced.add(("ConfigMap", volume["configMap"]["name"]))
    superuser = objects[("CassandraDatacenter", "dc1")]["spec"]["superuserSecretName"]
    tenant = objects[("Tenant", "workbench")]["spec"]["configuration"]["name"]
    referenced |= {("Secret", superuser), ("Secret", tenant)}
    assert referenced <= names, referenced - names
    assert decoded(next(d for (k, n), d in objects.items() if k == "Secret" and d["metadata"]["name"] == superuser)) \
        == {"username": "workbench", "password": LOGINS["cassandra_password"]}
    config = decoded(next(d for d in objects.values() if d["metadata"]["name"] == tenant))["config.env"]
    assert f'MINIO_ROOT_USER="{LOGINS["s3_access_key"]}"' in config
    assert f'MINIO_ROOT_PASSWORD="{LOGINS["s3_secret_key"]}"' in config
    assert {doc["metadata"]["namespace"] for doc in objects.values()} == {"bench"}


def test_ignite_nodes_find_each_other_through_the_headless_service(rendered):
    _, _, objects = rendered
    xml = objects[("ConfigMap", "ignite-config")]["data"]["ignite.xml"]
    beans = "{http://www.springframework.org/schema/beans}"

    def properties(element: ET.Element) -> dict[str, str | None]:
        return {p.get("name"): p.get("value") for p in element.findall(f"{beans}property")}

    nodes = {bean.get("class").rsplit(".", 1)[1]: properties(bean) for bean in ET.fromstring(xml).iter(f"{beans}bean")
             if bean.get("class").endswith(("IgniteConfiguration", "KubernetesConnectionConfiguration"))}
    assert nodes["KubernetesConnectionConfiguration"]["serviceName"] == \
        objects[("StatefulSet", "ignite")]["spec"]["serviceName"] == "ignite"
    assert objects[("Service", "ignite")]["spec"]["clusterIP"] == "None"
    assert nodes["IgniteConfiguration"]["authenticationEnabled"] == "true"  # as the local stack
    regions = {properties(bean)["name"]: properties(bean)["persistenceEnabled"] for bean in ET.fromstring(xml).iter(
        f"{beans}bean") if bean.get("class").endswith("DataRegionConfiguration")}
    assert "IGNITE_PERSISTENCE" in regions["default"] and regions["workbench_auth"] == "true"
    rules = objects[("Role", "ignite-discovery")]["rules"][0]
    assert "endpoints" in rules["resources"] and "get" in rules["verbs"]


def test_triton_asks_for_gpus(rendered):
    _, _, objects = rendered
    triton = objects[("Deployment", "triton")]["spec"]["template"]["spec"]["containers"][0]
    assert triton["resources"]["limits"] == {"nvidia.com/gpu": 1}


def test_secret_files_are_private_and_out_of_the_kustomization(rendered):
    settings, out, _ = rendered
    for name in SECRET_FILES:
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    assert (out / ".gitignore").read_text().split() == list(SECRET_FILES)
    kustomization = (out / "kustomization.yaml").read_text()
    assert not any(secret in kustomization for secret in settings.secrets())
    assert yaml.safe_load(kustomization)["resources"] == ["base"]


def test_the_base_renders_alone():
    docs = render(Settings(_env_file=None), BASE)
    assert {doc["kind"] for doc in docs} >= {"CassandraDatacenter", "Tenant", "StatefulSet", "Deployment", "Job"}


@pytest.mark.parametrize(("topology", "message"), [
    ({"cassandra_replication_factor": 4}, "WORKBENCH_CASSANDRA_REPLICATION_FACTOR=4 is larger than"),
    ({"ignite_backups": 3}, "WORKBENCH_IGNITE_BACKUPS=3 needs at least 4 nodes"),
    ({"s3_nodes": 2, "s3_drives_per_node": 1}, "WORKBENCH_S3_DRIVES_PER_NODE=2"),
    ({"client_ranks": 3}, "WORKBENCH_CLIENT_RANKS=3 is not a multiple of --ranks-per-pod 2"),
])
def test_a_topology_the_cluster_cannot_run_is_one_line(tmp_path, topology, message):
    with pytest.raises(WorkbenchError) as error:
        write_overlay(cluster_settings(**topology), tmp_path / "o", K8sOptions(ranks_per_pod=2))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "o").exists()  # nothing written


def test_default_or_missing_logins_are_refused(tmp_path):
    with pytest.raises(WorkbenchError, match="default credentials"):
        write_overlay(cluster_settings(ignite_password="ignite", ignite_username="ignite"), tmp_path / "o")
    with pytest.raises(WorkbenchError, match="WORKBENCH_IGNITE_PASSWORD is not set"):
        write_overlay(Settings(_env_file=None, **{**LOGINS, "ignite_password": None}), tmp_path / "o")


def test_the_command_writes_and_renders(tmp_path, monkeypatch):
    for name, value in LOGINS.items():
        monkeypatch.setenv(f"WORKBENCH_{name.upper()}", value)
    monkeypatch.setenv("WORKBENCH_CLIENT_RANKS", "2")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli_k8s.app, ["k8s", "--out", str(tmp_path / "o"), "--namespace", "ns1"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "1 CassandraDatacenter" in result.output and "kubectl apply -k" in result.output
    assert kustomize_binary(Settings(_env_file=None)).is_file()


@pytest.mark.slow
@pytest.mark.parametrize("persistence", ["true", "false"])
def test_ignite_loads_the_node_configuration(rendered, tmp_path, persistence):
    """Ignite 2.17 itself (ignite-spring + ignite-kubernetes from Maven Central) parses the ConfigMap's XML with a
    pod's environment: the Spring expressions, the Kubernetes IP finder's classes, authentication."""
    from workbench.stack.java import EXPORTS, OPENS
    from workbench.stack.provision import maven_fetch, require_tool

    settings, _, objects = rendered
    lib = maven_fetch("ignite-kubernetes", settings.cache_dir / f"ignite-kubernetes-{Ignite.version}", [
        f"org.apache.ignite:ignite-kubernetes:{Ignite.version}", f"org.apache.ignite:ignite-spring:{Ignite.version}"])
    xml = tmp_path / "ignite.xml"
    xml.write_text(objects[("ConfigMap", "ignite-config")]["data"]["ignite.xml"])
    env = {"PATH": os.environ["PATH"], "POD_NAME": "ignite-2", "POD_NAMESPACE": "bench",
           "IGNITE_PERSISTENCE": persistence, "IGNITE_DATA_REGION_MB": "2048"}
    check = Path(__file__).parents[1] / "fixtures" / "IgniteConfigCheck.java"
    done = subprocess.run([require_tool("java"), *[f"--add-opens={m}=ALL-UNNAMED" for m in OPENS],
                           *[f"--add-exports={m}=ALL-UNNAMED" for m in EXPORTS], "-cp", f"{lib}/*", str(check),
                           str(xml)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert printed == {"consistentId": "ignite-2", "authentication": "true", "persistence": persistence,
                       "regionBytes": str(2048 * 2**20), "thinPort": "10800",
                       "ipFinder": f"{IP_FINDERS}.kubernetes.TcpDiscoveryKubernetesIpFinder"}
