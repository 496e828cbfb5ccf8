"""Endpoints, credentials and paths: one settings object for every part of the package.

Values come from environment variables (``WORKBENCH_*``) or a ``.env`` file, never from code.
``docker-compose.yml`` reads the same ``.env``, so the local stack and the compose stack agree.
"""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
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


# Each server's well-known out-of-the-box login: refused unless Settings.dev_mode is set.
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
    tls_dir: Path | None = Field(None, description="certificates of the local stack (default: <state_dir>/tls)")
    tls_ca_file: Path | None = Field(None, description="CA bundle clients trust (default: <tls_dir>/ca.crt)")
    worker_start: Literal["forkserver", "spawn", "fork"] = Field(
        "forkserver", description="how torch DataLoader workers start: forkserver and spawn never fork a process "
                                  "that already runs threads (TF, gRPC, drivers); fork needs no server start")

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
    ignite_discovery_port: int = 47500
    ignite_communication_port: int = 47100
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

    def port(self, service: str, via_proxy: bool = False) -> int:
        """The port a client uses for `service`; `via_proxy` goes through toxiproxy's network emulation."""
        if service not in PROXIED:
            raise WorkbenchError(f"unknown service path '{service}': use one of {', '.join(PROXIED)}")
        upstream, proxy = PROXIED[service]
        return getattr(self, proxy if via_proxy else upstream)

    def s3_endpoint(self, via_proxy: bool = False) -> str:
        """MinIO's URL: https when the stack runs with TLS (a TLS stream passes toxiproxy unchanged)."""
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port('s3', via_proxy)}"

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
    current = Settings(_env_file=env_file)
    missing = [f"WORKBENCH_{field.upper()}" for pair in LOGINS if any(getattr(current, f) is None for f in pair)
               for field in pair]
    if not missing:
        return False
    fresh = {f"WORKBENCH_{field.upper()}": value for field, value in generated_credentials().items()}
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    lines = [line for line in lines if line.split("=", 1)[0] not in missing]
    lines += [f"{name}={fresh[name]}" for name in missing]
    env_file.touch(exist_ok=True)
    env_file.chmod(0o600)
    env_file.write_text("\n".join(lines) + "\n")
    get_settings.cache_clear()
    return True


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
