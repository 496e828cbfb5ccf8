"""The local stack: real Cassandra, MinIO, Ignite, Triton and toxiproxy servers run as processes."""

from workbench.stack.manager import ServiceStatus, down, logs, provision, status, up

__all__ = ["ServiceStatus", "down", "logs", "provision", "status", "up"]
