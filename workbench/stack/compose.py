"""Server configuration for `docker compose`, written by the same code as the local stack's.

Why: the official images cannot switch on Cassandra's PasswordAuthenticator and client TLS, or
Ignite's authentication and SSL, from environment variables; they read configuration files. This
writes those files into `<state_dir>/compose/` from the local stack's own templates, so both stacks
run the same settings, with container paths and compose's service names as hosts.

The folder is mode 700, so no other user of the machine can reach it; the files in it are 644 because
a bind-mounted file keeps its host owner and the containers run as their own users (Cassandra as uid
999). Logins never appear in these files: the probes of `workbench stack status --stack compose`
create them on first contact, as on the local stack.
"""

from __future__ import annotations

from pathlib import Path

from workbench.config import Settings
from workbench.stack.cassandra import Cassandra
from workbench.stack.ignite import Ignite, ignite_xml
from workbench.stack.tls import Certificates, ensure_certificates

SERVICE_HOSTS = ("cassandra", "minio", "ignite", "triton")  # names the containers reach each other by
CERTS = Path("/certs")  # where docker-compose.yml mounts the TLS files in every container
CASSANDRA_STATE = Path("/var/lib")  # the image's data volume is /var/lib/cassandra
IGNITE_HOME = Path("/opt/ignite/apache-ignite")  # the image's work volume is <home>/work
TLS_FILES = ("ca.crt", "server.crt", "server.key", "server.p12", "truststore.p12", "keystore.pass")


def compose_dir(settings: Settings) -> Path:
    return settings.state_dir / "compose"


def write_compose_config(settings: Settings) -> Path:
    """Write cassandra.yaml, ignite.xml and the TLS files docker-compose.yml mounts; returns the folder."""
    settings.check_credentials()
    out = compose_dir(settings)
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    certs = ensure_certificates(settings, SERVICE_HOSTS)
    (out / "certs").mkdir(exist_ok=True)
    for name in TLS_FILES:
        _write(out / "certs" / name, (certs.root / name).read_bytes())
    (out / "minio-certs" / "CAs").mkdir(parents=True, exist_ok=True)  # MinIO's --certs-dir layout
    _write(out / "minio-certs" / "public.crt", certs.server_cert.read_bytes())
    _write(out / "minio-certs" / "private.key", certs.server_key.read_bytes())
    _write(out / "minio-certs" / "CAs" / "ca.crt", certs.ca_cert.read_bytes())
    _write(out / "cassandra.yaml", cassandra_yaml(settings, certs).encode())
    _write(out / "ignite.xml", compose_ignite_xml(settings).encode())
    return out


def cassandra_yaml(settings: Settings, certs: Certificates) -> str:
    """The local stack's cassandra.yaml with the container's host name, data volume and certificate paths."""
    inside = settings.model_copy(update={
        "host": "cassandra", "state_dir": CASSANDRA_STATE, "cassandra_port": 9042, "cassandra_storage_port": 7000,
        "tls_dir": certs.root,
    })
    return Cassandra(inside).yaml().replace(str(certs.root), str(CERTS))


def compose_ignite_xml(settings: Settings) -> str:
    """The local stack's Ignite node configuration with the container's host name, ports and paths."""
    inside = settings.model_copy(update={
        "host": "ignite", "ignite_port": 10800, "ignite_discovery_port": 47500, "ignite_communication_port": 47100,
        "tls_dir": CERTS,
    })
    return ignite_xml(inside, IGNITE_HOME, Ignite.health_cache, Ignite(inside).authentication)


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o644)
