"""Kubernetes manifests for running the workbench against a cluster: a kustomize overlay written from Settings.

`deploy/k8s/base` holds the services as their users run them (cass-operator's CassandraDatacenter, the MinIO
operator's Tenant, an Ignite StatefulSet, a Triton Deployment) and the client ranks as an Indexed Job.
`write_overlay` copies that base into a folder and adds a kustomization that sets what the settings say: node
counts, replication factor and consistency, Ignite backups and persistence, MinIO's erasure set (servers x
drives), the client ranks and the pods that run them, plus the Secrets of the workbench's logins (files of mode
600, listed in the folder's .gitignore). `render` runs `kustomize build` on it (the binary is built once
through the Go module proxy, like the stack's other Go programs). No cluster is needed for either.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import SecretStr

from workbench.config import TOPOLOGY_FIELDS, Settings
from workbench.errors import WorkbenchError, first_line
from workbench.stack.provision import go_install

KUSTOMIZE_VERSION = "5.8.1"  # the newest kustomize v5 whose module builds with Go 1.24 (5.8.2 needs Go 1.26)
BASE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"
SECRET_FILES = ("credentials.env", "cassandra-superuser.env", "minio-config.env")
RENDEZVOUS = "workbench-clients-0.workbench-clients:29400"  # pod 0 of the client Job (deploy/k8s/base/clients.yaml)


@dataclass(frozen=True)
class K8sOptions:
    """What the settings do not say: where it runs, which images, what the client ranks read."""

    namespace: str = "workbench"
    image: str = "workbench:latest"
    triton_image: str = "workbench-triton:2.51"
    loader: str = "s3-shards"
    dataset: str | None = None
    ranks_per_pod: int = 1
    triton_gpus: int = 0


def check_topology(settings: Settings, options: K8sOptions) -> int:
    """The client pods the ranks need; one line for a topology the cluster would refuse or could not hold."""
    if settings.cassandra_replication_factor > settings.cassandra_nodes:
        raise WorkbenchError(f"WORKBENCH_CASSANDRA_REPLICATION_FACTOR={settings.cassandra_replication_factor} is "
                             f"larger than WORKBENCH_CASSANDRA_NODES={settings.cassandra_nodes}: raise the node "
                             "count or lower the factor")
    if settings.ignite_backups and settings.ignite_backups >= settings.ignite_nodes:
        raise WorkbenchError(f"WORKBENCH_IGNITE_BACKUPS={settings.ignite_backups} needs at least "
                             f"{settings.ignite_backups + 1} nodes, WORKBENCH_IGNITE_NODES is {settings.ignite_nodes}")
    drives = settings.s3_nodes * settings.s3_drives_per_node
    if settings.s3_nodes in (2, 3) and drives < 4:
        raise WorkbenchError(f"the MinIO operator refuses a pool of {settings.s3_nodes} servers with "
                             f"{settings.s3_drives_per_node} drive each (erasure coding needs at least 4 drives): "
                             "set WORKBENCH_S3_DRIVES_PER_NODE=2")
    if options.ranks_per_pod < 1 or settings.client_ranks % options.ranks_per_pod:
        raise WorkbenchError(f"WORKBENCH_CLIENT_RANKS={settings.client_ranks} is not a multiple of "
                             f"--ranks-per-pod {options.ranks_per_pod}: every client pod runs the same number of ranks")
    return settings.client_ranks // options.ranks_per_pod


def ignite_addresses(settings: Settings) -> list[str]:
    """Every pod of the Ignite StatefulSet through its headless service (partition-aware clients)."""
    return [f"ignite-{k}.ignite:10800" for k in range(settings.ignite_nodes)]


def settings_literals(settings: Settings) -> list[str]:
    """WORKBENCH_* values the overlay merges into the ConfigMap every pod reads: topology and Ignite's pods."""
    values: dict[str, object] = {name: getattr(settings, name) for name in TOPOLOGY_FIELDS if name != "node_network"}
    values.update(launcher="torchrun", ignite_addresses=ignite_addresses(settings))
    literals = []
    for name, value in values.items():
        text = json.dumps(value) if isinstance(value, list) else str(value).lower() if isinstance(value, bool) \
            else str(value)
        literals.append(f"WORKBENCH_{name.upper()}={text}")
    return literals


LOGIN_FIELDS = ("s3_access_key", "s3_secret_key", "cassandra_username", "cassandra_password", "ignite_username",
                "ignite_password")


def _login_value(settings: Settings, name: str) -> str:
    """A login setting fit for an env file and MinIO's config.env; one line naming the setting otherwise."""
    value = getattr(settings, name)
    value = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not value:
        raise WorkbenchError(f"WORKBENCH_{name.upper()} is not set: run `workbench init` (it writes generated "
                             "logins to .env), or set it yourself")
    if any(c in value for c in '"\\\n\r'):
        raise WorkbenchError(f"WORKBENCH_{name.upper()} holds a quote, backslash or line break, which the Secrets' "
                             "env files cannot carry: choose another value")
    return value


def secret_files(settings: Settings) -> dict[str, str]:
    """The Secrets' contents: the workbench's logins for its pods, the Cassandra superuser cass-operator creates,
    MinIO's root login for the Tenant (the same logins the local stack uses; default ones refused)."""
    settings.check_credentials()
    login = {name: _login_value(settings, name) for name in LOGIN_FIELDS}
    return {
        "credentials.env": "".join(f"WORKBENCH_{name.upper()}={value}\n" for name, value in login.items()),
        "cassandra-superuser.env": f"username={login['cassandra_username']}\npassword={login['cassandra_password']}\n",
        "minio-config.env": f'export MINIO_ROOT_USER="{login["s3_access_key"]}"\n'
                            f'export MINIO_ROOT_PASSWORD="{login["s3_secret_key"]}"\n',
    }


def _image(name: str, reference: str) -> dict[str, str]:
    """A kustomize image entry: `registry/name:tag` (a colon after the last slash is the tag)."""
    repository, sep, tag = reference.rpartition(":")
    if not sep or "/" in tag or not repository:
        repository, tag = reference, "latest"
    return {"name": name, "newName": repository, "newTag": tag}


def _patch(kind: str, name: str, operations: list[dict], group: str = "", version: str = "v1") -> dict:
    target = {"group": group, "version": version, "kind": kind, "name": name} if group else \
        {"version": version, "kind": kind, "name": name}
    return {"target": target, "patch": yaml.safe_dump(operations, sort_keys=False)}


def client_args(settings: Settings, options: K8sOptions, pods: int) -> list[str]:
    """The client pods' command: `workbench bench clients`, the pods meeting at pod 0's rendezvous."""
    args = ["workbench", "bench", "clients", "--loader", options.loader, "--ranks", str(settings.client_ranks),
            "--launcher", "torchrun", "--direct", "--results-dir", "/results"]
    if options.dataset:
        args += ["--dataset", options.dataset]
    if pods > 1:
        args += ["--nnodes", str(pods), "--rdzv-endpoint", RENDEZVOUS]
    return args


def kustomization(settings: Settings, options: K8sOptions) -> dict:
    """The overlay's kustomization.yaml (as a dict): the base plus everything the settings decide."""
    pods = check_topology(settings, options)
    patches = [
        _patch("CassandraDatacenter", "dc1", [
            {"op": "replace", "path": "/spec/size", "value": settings.cassandra_nodes}], "cassandra.datastax.com",
            "v1beta1"),
        _patch("Tenant", "workbench", [
            {"op": "replace", "path": "/spec/pools/0/servers", "value": settings.s3_nodes},
            {"op": "replace", "path": "/spec/pools/0/volumesPerServer", "value": settings.s3_drives_per_node}],
            "minio.min.io", "v2"),
        _patch("StatefulSet", "ignite", [{"op": "replace", "path": "/spec/replicas", "value": settings.ignite_nodes}],
               "apps"),
        _patch("Job", "workbench-clients", [
            {"op": "replace", "path": "/spec/completions", "value": pods},
            {"op": "replace", "path": "/spec/parallelism", "value": pods},
            {"op": "replace", "path": "/spec/template/spec/containers/0/args",
             "value": client_args(settings, options, pods)}], "batch"),
    ]
    if options.triton_gpus:
        patches.append(_patch("Deployment", "triton", [
            {"op": "add", "path": "/spec/template/spec/containers/0/resources/limits",
             "value": {"nvidia.com/gpu": options.triton_gpus}}], "apps"))
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": options.namespace,
        "resources": ["base"],
        "configMapGenerator": [{"name": "workbench-settings", "behavior": "merge",
                                "literals": settings_literals(settings)}],
        "secretGenerator": [
            {"name": "workbench-credentials", "envs": ["credentials.env"]},
            {"name": "workbench-cassandra-superuser", "envs": ["cassandra-superuser.env"]},
            {"name": "workbench-minio-config", "files": ["config.env=minio-config.env"]},
        ],
        "patches": patches,
        "images": [_image("workbench", options.image), _image("workbench-triton", options.triton_image)],
    }


HEADER = ("# Written by `workbench stack k8s` from the workbench's settings; apply with `kubectl apply -k .`\n"
          "# (cass-operator and the MinIO operator installed first). The *.env files hold the logins: keep them\n"
          "# out of version control (.gitignore lists them).\n")


def write_overlay(settings: Settings, out: Path, options: K8sOptions | None = None) -> Path:
    """Write `out/kustomization.yaml`, `out/base/` (a copy of deploy/k8s/base) and the Secrets' files."""
    options = options or K8sOptions()
    if not BASE.is_dir():
        raise WorkbenchError(f"the Kubernetes base {BASE} is missing: run `workbench stack k8s` from a checkout of "
                             "the workbench")
    document = kustomization(settings, options)
    files = secret_files(settings)
    try:
        out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out / "base", ignore_errors=True)
        shutil.copytree(BASE, out / "base")
        for name, text in files.items():
            path = out / name
            path.touch(mode=0o600, exist_ok=True)
            path.chmod(0o600)
            path.write_text(text)
        (out / ".gitignore").write_text("".join(f"{name}\n" for name in SECRET_FILES))
        (out / "kustomization.yaml").write_text(HEADER + yaml.safe_dump(document, sort_keys=False))
    except OSError as exc:
        raise WorkbenchError(f"cannot write the Kubernetes overlay to {out}: {first_line(exc)}") from exc
    return out


def kustomize_binary(settings: Settings) -> Path:
    """kustomize, built once from source through the Go module proxy into the cache."""
    return go_install("kustomize", settings.cache_dir / f"kustomize-{KUSTOMIZE_VERSION}",
                      f"sigs.k8s.io/kustomize/kustomize/v5@v{KUSTOMIZE_VERSION}", "kustomize",
                      ldflags=f"-X sigs.k8s.io/kustomize/api/provenance.version=v{KUSTOMIZE_VERSION}")


def provision_kustomize(settings: Settings) -> None:
    """Build kustomize with the stack's other programs (`stack up`/`stack provision`); a failure is one warning
    line: only `workbench stack k8s` and its tests need it, and they build it on first use too."""
    try:
        kustomize_binary(settings)
    except WorkbenchError as exc:
        print(f"warning: kustomize not built: {exc}", file=sys.stderr)


def render(settings: Settings, folder: Path, timeout_s: float = 120.0) -> list[dict]:
    """`kustomize build folder`, parsed: every object the cluster would get."""
    binary = kustomize_binary(settings)
    try:
        done = subprocess.run([str(binary), "build", str(folder)], capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise WorkbenchError(f"kustomize build {folder} took over {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise WorkbenchError(f"kustomize build {folder} failed: {first_line(done.stderr.strip() or done.stdout)}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
