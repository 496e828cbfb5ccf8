"""MinIO, built from source with the Go toolchain through the Go module proxy; the stack's S3 server.

Root keys come from Settings (generated into .env; the well-known minioadmin pair is refused unless
dev_mode). With settings.tls, MinIO serves S3 and its console over TLS only: `--certs-dir` holds the
stack's server certificate as ``public.crt``/``private.key`` and its CA under ``CAs/`` (which MinIO's own
internal clients trust).

Topology (settings.s3_nodes processes x settings.s3_drives_per_node drive folders each):

* 1 x 1: MinIO's single-drive mode on ``<data_dir>/data``, as the stack always ran.
* 1 x d: one process, one erasure set of d folders.
* N x d: distributed mode. Node k listens on ``node_host(k):s3_port``; every node starts with the same
  ordered list of every node's drives (``http://node_host(k):s3_port/<node k's data_dir>/drives-NxD/<i>``).
  MinIO groups them into erasure sets (one set up to 16 drives) with its default parity for the set size
  (EC:1 for 2-3 drives, EC:2 for 4-5, EC:3 for 6-7, EC:4 for 8 or more; MINIO_STORAGE_CLASS_STANDARD is not
  set). So 4 x 1 (EC:2: reads need 2 drives, writes 3) survives the loss of one process for reads and writes;
  2 x 1 and 2 x 2 keep reads only. Clients use node 0 (through its toxiproxy proxy ``s3`` when via_proxy);
  any node serves any object, so one node's address is enough.

Three MinIO behaviours shape the multi-drive launch:

* MinIO refuses drives on the root filesystem unless MINIO_CI_CD=1, so multi-drive topologies set it (it
  also caps MinIO's buffer pool at 256 MiB, welcome on a shared machine).
* MinIO counts every loopback address as this host: with nodes on 127.0.0.x at one port each process would
  claim every drive. ``_MINIO_SERVER_LOCAL=<host:port>`` names this process's own endpoints; MinIO honours it
  only when it believes it is orchestrated (/.dockerenv or KUBERNETES_SERVICE_HOST), so nodes get
  KUBERNETES_SERVICE_HOST as well (nothing else of a local stack depends on it: no MINIO_DOMAIN, no updates).
* MinIO also listens on every loopback address of the machine (127.0.0.1, ::1) at its port, with
  SO_REUSEPORT: all nodes share ``127.0.0.1:s3_port``, and any other MinIO on the machine at that port joins
  them. A cluster with node 0 on 127.0.0.1 has node 0's address answered by whichever node the kernel picks;
  a cluster on other addresses (WORKBENCH_HOST=127.0.0.31) must use ports no other MinIO uses.

Health: a node is healthy when it answers S3 with the stack's login and, in distributed mode, reports the
cluster's write quorum (``/minio/health/cluster``); `cluster_health` says healthy / degraded / down.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import requests

from workbench.config import Settings
from workbench.stack.provision import go_install
from workbench.stack.service import Health, Launch, Service
from workbench.stack.tls import Certificates
from workbench.storage import s3_client

MODULE = "github.com/minio/minio"
PSEUDO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"  # the last source release published as a Go module
RELEASE_TIME = "2026-02-12T20:18:48Z"  # MinIO reads its version as a release time


class MinIO(Service):
    name = "minio"
    version = RELEASE_TIME.replace(":", "-")

    @classmethod
    def node_count(cls, settings: Settings) -> int:
        return settings.s3_nodes

    @property
    def distributed(self) -> bool:
        return self.settings.s3_nodes > 1

    def url(self) -> str:
        """This node's S3 endpoint (node 0's is settings.s3_endpoint())."""
        return node_url(self.settings, self.node)

    def drives(self) -> list[Path]:
        """This node's drive folders; each topology keeps its own, so changing it never mixes formats."""
        nodes, per_node = self.settings.s3_nodes, self.settings.s3_drives_per_node
        if nodes == 1 and per_node == 1:
            return [self.data_dir / "data"]
        base = self.data_dir.absolute() / f"drives-{nodes}x{per_node}"
        return [base / str(i) for i in range(1, per_node + 1)]

    def endpoints(self) -> list[str]:
        """MinIO's drive arguments, identical and in the same order on every node."""
        if not self.distributed:
            return [str(drive) for drive in self.drives()]
        nodes = [MinIO(self.settings, k) for k in range(self.settings.s3_nodes)]
        return [f"{node.url()}{drive}" for node in nodes for drive in node.drives()]

    def provision(self) -> None:
        stamp = (f"-X {MODULE}/cmd.Version={RELEASE_TIME} -X {MODULE}/cmd.ReleaseTag=DEVELOPMENT.{self.version}"
                 f" -X {MODULE}/cmd.CommitID={PSEUDO_VERSION.rsplit('-', 1)[1]}")
        go_install(self.name, self.home, f"{MODULE}@{PSEUDO_VERSION}", "minio", ldflags=stamp)

    def launch(self) -> Launch:
        self.settings.check_credentials()  # never minioadmin unless dev_mode, whoever calls launch
        access, secret = self.settings.s3_credentials()
        for drive in self.drives():
            drive.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret,
               "MINIO_UPDATE": "off", "MINIO_BROWSER_LOGIN_ANIMATION": "off"}
        if len(self.endpoints()) > 1:
            env["MINIO_CI_CD"] = "1"  # drives on the root filesystem (see the module docstring)
        address = f"{self.node_host}:{self.settings.s3_port}"
        if self.distributed:
            env |= {"_MINIO_SERVER_LOCAL": address, "KUBERNETES_SERVICE_HOST": self.node_host}
        command = [str(self.home / "minio"), "server", *self.endpoints(), "--quiet", "--address", address,
                   "--console-address", f"{self.node_host}:{self.settings.s3_console_port}"]
        if self.settings.tls:
            command += ["--certs-dir", str(self.certs_dir())]
        return Launch(command, env=env, cwd=self.data_dir)

    def certs_dir(self) -> Path:
        """MinIO's certificate folder, refreshed from the stack's TLS material at every start."""

        certs = Certificates(self.settings.certificates_dir())
        folder = self.data_dir / "certs"
        (folder / "CAs").mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        shutil.copyfile(certs.server_cert, folder / "public.crt")
        shutil.copyfile(certs.ca_cert, folder / "CAs" / "ca.crt")
        key = folder / "private.key"
        key.touch(mode=0o600, exist_ok=True)
        key.chmod(0o600)
        shutil.copyfile(certs.server_key, key)
        return folder

    def ports(self) -> dict[str, int]:
        return {"s3": self.settings.s3_port, "console": self.settings.s3_console_port}

    def probe(self) -> Health:
        response = s3_client(self.settings, endpoint=self.url()).list_buckets()
        version = f"{response['ResponseMetadata']['HTTPHeaders'].get('server', 'MinIO')} {self.version}"
        if self.distributed:
            quorum = _get(self.settings, self.url(), "/minio/health/cluster")
            if quorum.status_code != 200:
                return Health(False, version, f"answers, but the cluster has no write quorum at {self.url()} "
                                              f"(HTTP {quorum.status_code}): are the other minio nodes up?")
        return Health(True, version=version)


def node_url(settings: Settings, node: int) -> str:
    """Node `node`'s S3 endpoint, without toxiproxy."""
    return f"{'https' if settings.tls else 'http'}://{settings.node_host(node)}:{settings.s3_port}"


@dataclass(frozen=True)
class ClusterHealth:
    """What MinIO's health endpoints say about the whole cluster."""

    answering: dict[str, bool]  # node name -> its liveness endpoint answered
    write_quorum: int  # drives a write needs (0: no node answered)
    read_quorum: int  # drives a read needs
    writable: bool  # /minio/health/cluster: enough drives online for writes
    readable: bool  # /minio/health/cluster/read: enough for reads

    @property
    def state(self) -> Literal["healthy", "degraded", "down"]:
        """healthy: every node answers with write quorum; degraded: data still served with a node or drive
        missing; down: reads fail."""
        if self.writable and all(self.answering.values()):
            return "healthy"
        return "degraded" if self.readable else "down"

    @property
    def summary(self) -> str:
        missing = [name for name, up in self.answering.items() if not up]
        return (f"{self.state}: {len(self.answering) - len(missing)}/{len(self.answering)} nodes answer"
                + (f" ({', '.join(missing)} missing)" if missing else "")
                + f", write quorum {self.write_quorum} drives, read quorum {self.read_quorum}")


def cluster_health(settings: Settings) -> ClusterHealth:
    """Every node's liveness, then the quorums as the first answering node sees them."""
    nodes = [MinIO(settings, k) for k in range(MinIO.node_count(settings))]

    def live(node: MinIO) -> bool:
        try:
            return _get(settings, node.url(), "/minio/health/live").status_code == 200
        except requests.RequestException:
            return False

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        answering = dict(zip([n.node_name for n in nodes], pool.map(live, nodes), strict=True))
    first = next((n for n in nodes if answering[n.node_name]), None)
    if first is None:
        return ClusterHealth(answering, 0, 0, writable=False, readable=False)
    try:
        write = _get(settings, first.url(), "/minio/health/cluster")
        read = _get(settings, first.url(), "/minio/health/cluster/read")
    except requests.RequestException:
        return ClusterHealth(answering, 0, 0, writable=False, readable=False)
    return ClusterHealth(answering, int(write.headers.get("X-Minio-Write-Quorum", 0)),
                         int(read.headers.get("X-Minio-Read-Quorum", 0)), writable=write.status_code == 200,
                         readable=read.status_code == 200)


def _get(settings: Settings, url: str, path: str) -> requests.Response:
    """An unauthenticated health request (MinIO's health endpoints need no login)."""
    verify: bool | str = str(settings.ca_file()) if settings.tls else True
    return requests.get(url + path, timeout=settings.timeout_s, verify=verify)
