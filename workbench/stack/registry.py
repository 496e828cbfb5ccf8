"""The services of the stack, in start order (toxiproxy first: the others' client paths go through it)."""

from workbench.stack.cassandra import Cassandra
from workbench.stack.ignite import Ignite
from workbench.stack.minio import MinIO
from workbench.stack.service import Service
from workbench.stack.toxiproxy import Toxiproxy
from workbench.stack.triton import Triton

SERVICES: dict[str, type[Service]] = {
    "toxiproxy": Toxiproxy,
    "minio": MinIO,
    "cassandra": Cassandra,
    "ignite": Ignite,
    "triton": Triton,
}
