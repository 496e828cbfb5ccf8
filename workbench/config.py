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

    cassandra_port: int = 9042
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
        return f"http://{self.host}:{self.port('s3', via_proxy)}"

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
        return [f.get_secret_value() for f in fields if f is not None]


def ensure_credentials(env_file: Path = ENV_FILE) -> bool:
    """Write generated S3 root credentials to `env_file` (mode 600) if none are configured yet.

    Why: the local stack must never start with well-known default keys, and the values must live
    outside the code, where docker compose finds them too. Returns True when it wrote new ones.
    """
    current = Settings()
    if current.s3_access_key is not None and current.s3_secret_key is not None:
        return False
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    lines += [
        f"WORKBENCH_S3_ACCESS_KEY=wb-{secrets.token_hex(6)}",
        f"WORKBENCH_S3_SECRET_KEY={secrets.token_urlsafe(24)}",
    ]
    env_file.touch(exist_ok=True)
    env_file.chmod(0o600)
    env_file.write_text("\n".join(lines) + "\n")
    get_settings.cache_clear()
    return True


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
