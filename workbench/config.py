"""Endpoints, credentials and paths: one settings object for every part of the package.

Values come from environment variables (``WORKBENCH_*``) or a ``.env`` file, never from code.
``docker-compose.yml`` reads the same ``.env``, so the local stack and the compose stack agree.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workbench.errors import WorkbenchError

ENV_FILE = Path(".env")

# Each service path that toxiproxy can slow down: name -> (settings field of the upstream port, listen port field)
PROXIED = {
    "cassandra": ("cassandra_port", "proxy_cassandra_port"),
    "s3": ("s3_port", "proxy_s3_port"),
    "ignite": ("ignite_port", "proxy_ignite_port"),
    "triton_http": ("triton_http_port", "proxy_triton_http_port"),
    "triton_grpc": ("triton_grpc_port", "proxy_triton_grpc_port"),
}

# Service paths whose servers can run as several nodes: path -> the settings field with its node count.
NODE_COUNTS = {"cassandra": "cassandra_nodes", "s3": "s3_nodes", "ignite": "ignite_nodes"}


# node_network=netns: node 127.0.0.N runs in namespace `workbench-N` at 10.77.1.N (workbench.net.netns makes them).
NETNS_DIR = Path("/run/netns")  # where `ip netns add` names its namespaces
NETNS_PREFIX = "workbench-"
NETNS_NODES = "10.77.1."

# Each server's well-known out-of-the-box login: refused unless Settings.dev_mode is set.
CONSISTENCY_LEVELS = ("ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_ONE", "LOCAL_QUORUM", "EACH_QUORUM")
# Topology settings (Settings fields) that every result row records, so runs of different clusters never mix.
TOPOLOGY_FIELDS = ("cassandra_nodes", "cassandra_replication_factor", "cassandra_consistency", "ignite_nodes",
                   "ignite_backups", "ignite_persistence", "s3_nodes", "s3_drives_per_node", "client_ranks",
                   "launcher", "node_network")

DEFAULT_CREDENTIALS = {
    "cassandra": ("cassandra", "cassandra"),
    "s3": ("minioadmin", "minioadmin"),
    "ignite": ("ignite", "ignite"),
}


class Settings(BaseSettings):
    """Where the services are and how to reach them."""

    model_config = SettingsConfigDict(env_prefix="WORKBENCH_", env_file=ENV_FILE, extra="ignore")

    stack: Literal["local", "compose", "external"] = Field(
        "local", description="local: the CLI runs the servers as processes; compose/external: only connect"
    )
    cache_dir: Path = Field(Path.home() / ".cache" / "workbench", description="downloaded jars and binaries")
    state_dir: Path = Field(
        default_factory=lambda: Path.cwd() / ".stack",
        description="data, logs and pid files of this checkout's stack (beside the .env whose keys made them)",
    )
    host: str = Field("127.0.0.1", description="address every service binds to and clients connect to")
    timeout_s: float = Field(10.0, gt=0, description="connect/request timeout of every network call")
    dev_mode: bool = Field(False, description="allow the servers' well-known default credentials (never on a shared "
                                              "host); without it they are refused")
    tls: bool = Field(False, description="servers speak TLS and clients verify them against tls_ca_file")
    cassandra_client_auth: bool = Field(
        False, description="with tls: the stack's Cassandra requires client certificates signed by the stack's "
        "client CA (require_client_auth); the workbench's clients present <tls_dir>/client.crt")
    ignite_client_auth: bool = Field(
        False, description="with tls: Ignite's thin-client connector requires client certificates signed by the "
        "stack's client CA; the workbench's clients present <tls_dir>/client.crt")
    tls_dir: Path | None = Field(None, description="certificates of the local stack (default: <state_dir>/tls)")
    tls_ca_file: Path | None = Field(None, description="CA bundle clients trust (default: <tls_dir>/ca.crt)")
    worker_start: Literal["forkserver", "spawn", "fork"] = Field(
        "forkserver", description="how torch DataLoader workers start: forkserver and spawn never fork a process "
                                  "that already runs threads (TF, gRPC, drivers); fork needs no server start")
    malloc_tuning: bool = Field(True, description="loaders fix glibc's mmap/trim thresholds so big buffers are reused, "
                                                  "not faulted in afresh (workbench.memory)")

    cassandra_port: int = 9042
    cassandra_storage_port: int = 7000
    cassandra_jmx_port: int = 7199
    cassandra_username: str | None = None
    cassandra_password: SecretStr | None = None
    cassandra_keyspace: str = "workbench"

    s3_port: int = 9000
    s3_console_port: int = 9001
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None
    s3_region: str = "us-east-1"
    s3_bucket: str = "workbench"

    ignite_port: int = 10800
    # Ignite's own defaults (47500, 47100) lie in Linux's ephemeral range (32768-60999): an outgoing connection
    # that holds one when a node starts makes its bind fail. The nodes we start listen below that range.
    ignite_discovery_port: int = 27500
    ignite_communication_port: int = 27100
    ignite_username: str | None = None
    ignite_password: SecretStr | None = None

    triton_http_port: int = 8000
    triton_grpc_port: int = 8001
    triton_metrics_port: int = 8002
    triton_model_repository: Path = Path("triton_models")
    triton_cassandra_table: str = Field("workbench_triton.data_train",
                                        description="keyspace.table the cassandra_fetch model reads by default")

    toxiproxy_port: int = 8474
    proxy_cassandra_port: int = 19042
    proxy_s3_port: int = 19000
    proxy_ignite_port: int = 20800
    proxy_triton_http_port: int = 18000
    proxy_triton_grpc_port: int = 18001

    # Topology: how many nodes each service runs and how data is replicated across them; the client side
    # (ranks and their launcher). Local node k of a service listens on `node_host(k)`; external clusters list
    # their endpoints below instead.
    cassandra_nodes: int = Field(1, ge=1, le=9, description="Cassandra ring size of the local stack")
    cassandra_replication_factor: int = Field(1, ge=1, description="replication factor of new keyspaces")
    cassandra_consistency: Literal[CONSISTENCY_LEVELS] = Field(  # type: ignore[valid-type]
        "ONE", description="consistency level of every read and write")
    ignite_nodes: int = Field(1, ge=1, le=9, description="Ignite server nodes of the local stack")
    ignite_backups: int = Field(0, ge=0, description="backup copies of each partition of new caches")
    ignite_persistence: bool = Field(False, description="Ignite native persistence: caches survive a restart")
    s3_nodes: int = Field(1, ge=1, le=16, description="MinIO server processes (more than one: distributed mode)")
    s3_drives_per_node: int = Field(1, ge=1, le=16, description="MinIO drives (folders) per process")
    client_ranks: int = Field(1, ge=1, description="reader ranks of `workbench bench clients` by default")
    launcher: Literal["torchrun", "mpirun"] = Field("torchrun", description="what starts the client ranks")
    node_network: Literal["loopback", "netns"] = Field(
        "loopback", description="loopback: node k on 127.0.0.(k+1); netns: one network namespace per node")
    node_bandwidth_mbps: float = Field(
        0, ge=0, description="node_network=netns: each node's bandwidth cap in Mbit/s, each direction (0: none)")
    cassandra_contact_points: list[str] = Field(
        default_factory=list, description="external clusters: host[:port] of Cassandra nodes (JSON list)")
    s3_endpoints: list[str] = Field(default_factory=list, description="external clusters: S3 endpoint URLs")
    ignite_addresses: list[str] = Field(default_factory=list, description="external clusters: Ignite host:port")
    triton_urls: list[str] = Field(default_factory=list, description="external clusters: Triton host:port")

    @model_validator(mode="after")
    def _topology_fits(self) -> Settings:
        """Refuse, before anything starts, a replication the nodes cannot hold."""
        if self.stack == "local" and self.cassandra_replication_factor > self.cassandra_nodes:
            raise ValueError(
                f"WORKBENCH_CASSANDRA_REPLICATION_FACTOR={self.cassandra_replication_factor} is larger than "
                f"WORKBENCH_CASSANDRA_NODES={self.cassandra_nodes}: raise the node count or lower the factor")
        if self.stack == "local" and self.ignite_backups >= self.ignite_nodes and self.ignite_backups:
            raise ValueError(
                f"WORKBENCH_IGNITE_BACKUPS={self.ignite_backups} needs at least {self.ignite_backups + 1} nodes, "
                f"WORKBENCH_IGNITE_NODES is {self.ignite_nodes}: raise the node count or lower the backups")
        return self

    def node_host(self, node: int) -> str:
        """The address local node `node` (0-based) of a multi-node service listens on: its loopback address
        (`proxy_host`), or with node_network=netns its namespace's address once `stack up` made the namespace
        (the namespace of 127.0.0.N is at 10.77.1.N, see `workbench.net.netns`)."""
        namespace = self.node_namespace(node)
        if namespace is not None:
            return NETNS_NODES + namespace.removeprefix(NETNS_PREFIX)
        return self.proxy_host(node)

    def proxy_host(self, node: int) -> str:
        """Node `node`'s loopback address, where its toxiproxy proxies listen: node 0 is `host`, the others
        the next loopback addresses (127.0.0.2, ...), so every node keeps its service's ports. With
        node_network=loopback the node itself listens here too (then it is `node_host`)."""
        if node == 0:
            return self.host
        parts = self.host.split(".")
        if len(parts) != 4 or parts[0] != "127":
            raise WorkbenchError(f"host {self.host} is not a loopback address: multi-node local stacks place "
                                 "node k on 127.0.0.(k+1); set WORKBENCH_HOST=127.0.0.1")
        return ".".join([*parts[:3], str(int(parts[3]) + node)])

    def netns_name(self, node: int) -> str:
        """The network namespace of node `node` with node_network=netns, named after its loopback address."""
        return NETNS_PREFIX + self.proxy_host(node).rsplit(".", 1)[-1]

    def node_namespace(self, node: int) -> str | None:
        """The namespace node `node` runs in: None with loopback nodes, or where `stack up` could not make it."""
        if self.node_network != "netns" or not self.host.startswith("127."):
            return None
        name = self.netns_name(node)
        return name if (NETNS_DIR / name).exists() else None

    def nodes_of(self, path: str) -> int:
        """How many nodes serve a toxiproxy path (`PROXIED` names): 1 unless the service is clustered."""
        return getattr(self, NODE_COUNTS[path]) if path in NODE_COUNTS else 1

    def proxy_names(self, path: str) -> list[str]:
        """The toxiproxy proxies of a path, one per node: `cassandra`, `cassandra-2`, ... Node k's proxy
        listens on proxy_host(k) at the path's proxy port and forwards to node k's server (node_host(k))."""
        return [path if node == 0 else f"{path}-{node + 1}" for node in range(self.nodes_of(path))]

    def topology(self) -> dict[str, object]:
        """What every result row records about the clusters it measured."""
        return {name: getattr(self, name) for name in TOPOLOGY_FIELDS}

    def port(self, service: str, via_proxy: bool = False) -> int:
        """The port a client uses for `service`; `via_proxy` goes through toxiproxy's network emulation."""
        if service not in PROXIED:
            raise WorkbenchError(f"unknown service path '{service}': use one of {', '.join(PROXIED)}")
        upstream, proxy = PROXIED[service]
        return getattr(self, proxy if via_proxy else upstream)

    def s3_endpoint(self, via_proxy: bool = False) -> str:
        """MinIO's URL: https when the stack runs with TLS (a TLS stream passes toxiproxy unchanged); with
        WORKBENCH_S3_ENDPOINTS one of those per client rank (an external cluster: no toxiproxy on that path)."""
        if self.s3_endpoints:
            return rank_choice(self.s3_endpoints).strip()
        host = self.proxy_host(0) if via_proxy else self.node_host(0)
        return f"{'https' if self.tls else 'http'}://{host}:{self.port('s3', via_proxy)}"

    def s3_credentials(self) -> tuple[str, str]:
        """(access key, secret key), or a clear error saying where to set them."""
        if self.s3_access_key is None or self.s3_secret_key is None:
            raise WorkbenchError(
                "S3 credentials are not set: define WORKBENCH_S3_ACCESS_KEY and WORKBENCH_S3_SECRET_KEY "
                "in the environment or .env (`workbench stack up` writes generated ones to .env)"
            )
        return self.s3_access_key.get_secret_value(), self.s3_secret_key.get_secret_value()

    def secrets(self) -> list[str]:
        """Every configured secret value, so outputs can be scanned for leaks."""
        fields = (self.cassandra_password, self.s3_access_key, self.s3_secret_key, self.ignite_password)
        values = [f.get_secret_value() for f in fields if f is not None]
        keystore_password = self.certificates_dir() / "keystore.pass"
        if keystore_password.exists():
            values.append(keystore_password.read_text().strip())
        return values

    def certificates_dir(self) -> Path:
        return self.tls_dir or self.state_dir / "tls"

    def ca_file(self) -> Path:
        """The CA bundle clients verify servers with; a clear error when TLS is on but it is missing."""
        path = self.tls_ca_file or self.certificates_dir() / "ca.crt"
        if not path.is_file():
            raise WorkbenchError(
                f"TLS is on but the CA file {path} does not exist: run `workbench stack up` (it generates one) "
                "or set WORKBENCH_TLS_CA_FILE"
            )
        return path

    def check_credentials(self) -> None:
        """Refuse a server's well-known default credentials unless dev_mode is asked for explicitly."""
        if self.dev_mode:
            return
        configured = {
            "cassandra": (self.cassandra_username, self.cassandra_password),
            "s3": (self.s3_access_key, self.s3_secret_key),
            "ignite": (self.ignite_username, self.ignite_password),
        }
        for service, (user, secret) in configured.items():
            user_value = user.get_secret_value() if isinstance(user, SecretStr) else user
            if secret is not None and (user_value, secret.get_secret_value()) == DEFAULT_CREDENTIALS[service]:
                raise WorkbenchError(
                    f"{service} is configured with its well-known default credentials ('{user_value}'): "
                    "run `workbench init` for generated ones, or set WORKBENCH_DEV_MODE=1 on a private machine"
                )


_T = TypeVar("_T")
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")  # torchrun, Open MPI, MPICH (Hydra)


def rank_choice(items: Sequence[_T]) -> _T:
    """This client rank's item of an endpoint list (rank 0 outside torchrun/mpirun): R ranks spread over an
    external cluster's nodes as a load balancer would."""
    rank = next((int(value) for name in RANK_VARIABLES if (value := os.environ.get(name, "")).isdigit()), 0)
    return items[rank % len(items)]


# Settings fields that form one login each: ensure_credentials writes a fresh pair when either is unset.
LOGINS = [("s3_access_key", "s3_secret_key"), ("cassandra_username", "cassandra_password"),
          ("ignite_username", "ignite_password")]


def generated_credentials() -> dict[str, str]:
    """Fresh random logins for every service, by settings field (user names are not secret, passwords are)."""
    return {
        "s3_access_key": f"wb-{secrets.token_hex(6)}",
        "s3_secret_key": secrets.token_urlsafe(24),
        "cassandra_username": "workbench",
        "cassandra_password": secrets.token_urlsafe(24),
        "ignite_username": "workbench",
        "ignite_password": secrets.token_urlsafe(24),
    }


def ensure_credentials(env_file: Path = ENV_FILE) -> bool:
    """Write generated credentials to `env_file` (mode 600) for every service that has none yet.

    Why: the local stack must never start with well-known default logins, and the values must live
    outside the code, where docker compose finds them too. Returns True when it wrote new ones.
    """
    current = load_settings(_env_file=env_file)
    missing = [field for pair in LOGINS if any(getattr(current, f) is None for f in pair) for field in pair]
    if not missing:
        return False
    fresh = generated_credentials()
    write_settings({field: fresh[field] for field in missing}, env_file)
    return True


def write_settings(values: dict[str, object], env_file: Path = ENV_FILE) -> None:
    """Persist settings (by field name) in `env_file`, so every later command sees the same topology."""
    names = {f"WORKBENCH_{field.upper()}": value for field, value in values.items()}
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    lines = [line for line in lines if line.split("=", 1)[0] not in names]
    lines += [f"{name}={value}" for name, value in names.items()]
    env_file.touch(exist_ok=True)
    env_file.chmod(0o600)
    env_file.write_text("\n".join(lines) + "\n")
    get_settings.cache_clear()


def cluster_topology(nodes: int) -> dict[str, object]:
    """`stack up --nodes N`: N nodes of each storage service, replicated so that one node can be lost."""
    return {"cassandra_nodes": nodes, "cassandra_replication_factor": min(3, nodes),
            "cassandra_consistency": "QUORUM" if nodes > 1 else "ONE", "ignite_nodes": nodes,
            "ignite_backups": 1 if nodes > 1 else 0, "s3_nodes": nodes}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process; a bad value is one line naming the variable and what to do."""
    return load_settings()


def load_settings(**sources) -> Settings:
    """Settings(**sources), a bad value as one line naming the variable and what to do (a WorkbenchError)."""
    try:
        return Settings(**sources)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = f"WORKBENCH_{'_'.join(str(p) for p in err['loc']).upper()}: " if err["loc"] else ""
            problems.append(name + err["msg"].removeprefix("Value error, "))
        raise WorkbenchError("settings: " + "; ".join(problems)) from None
