"""NVIDIA Triton Inference Server, the `tritonserver` binary bundled in the nvidia-pytriton wheel.

It runs python-backend models on CPU, and on a GPU when one is present. The Python backend needs the
stub built for the running interpreter, so the stack assembles a backend folder in its state dir.

With settings.tls the gRPC endpoint speaks TLS only (the stack's PEM certificate and key). Triton's
HTTP endpoint has no TLS of its own: it stays plain and bound to settings.host (127.0.0.1 by default),
so it is reachable from this machine only; put a TLS proxy in front of it to expose it. Metrics likewise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

import requests

from workbench.clients import triton_client
from workbench.errors import WorkbenchError
from workbench.stack.service import Health, Launch, Service
from workbench.stack.tls import Certificates


def model_environment(s) -> dict[str, str]:
    """What the python-backend models read from Triton's environment (its cwd is the state dir: no .env
    is read there): cassandra_fetch's Cassandra connection, and the S3 and Ignite settings with which the
    classifier reads its checkpoint (`workbench.model_serving`). Secrets travel only in the child's
    environment, never on its command line or in a log."""
    env = {"WORKBENCH_HOST": s.host, "WORKBENCH_CASSANDRA_PORT": str(s.cassandra_port),
           "WORKBENCH_TIMEOUT_S": str(s.timeout_s), "WORKBENCH_TRITON_CASSANDRA_TABLE": s.triton_cassandra_table,
           "WORKBENCH_S3_PORT": str(s.s3_port), "WORKBENCH_S3_REGION": s.s3_region,
           "WORKBENCH_S3_BUCKET": s.s3_bucket, "WORKBENCH_IGNITE_PORT": str(s.ignite_port),
           "WORKBENCH_TLS": "true" if s.tls else "false"}  # the clients' TLS: the CA only, never a keystore
    for user, password, name in ((s.cassandra_username, s.cassandra_password, "CASSANDRA"),
                                 (s.ignite_username, s.ignite_password, "IGNITE")):
        if user and password:
            env[f"WORKBENCH_{name}_USERNAME"] = user
            env[f"WORKBENCH_{name}_PASSWORD"] = password.get_secret_value()
    if s.s3_access_key and s.s3_secret_key:
        env["WORKBENCH_S3_ACCESS_KEY"] = s.s3_access_key.get_secret_value()
        env["WORKBENCH_S3_SECRET_KEY"] = s.s3_secret_key.get_secret_value()
    if s.tls:
        env["WORKBENCH_TLS_CA_FILE"] = str(s.ca_file())
    return env


def pytriton_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise WorkbenchError("Triton needs the nvidia-pytriton wheel: pip install -e '.[triton]' (make venv does)")
    return Path(spec.origin).parent / "tritonserver"


class Triton(Service):
    name = "triton"
    version = "2.51.0"
    startup_timeout_s = 120.0

    def provision(self) -> None:
        """Link the python backend with the stub that matches this interpreter (as pytriton does)."""
        root = pytriton_root()
        stub = root / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
        if not (stub / "triton_python_backend_stub").exists():
            raise WorkbenchError(f"nvidia-pytriton ships no Triton python stub for Python {sys.version.split()[0]}")
        backend = self.data_dir / "backends" / "python"
        backend.mkdir(parents=True, exist_ok=True)
        for source in [*(root / "backends" / "python").glob("*.*"), stub / "triton_python_backend_stub"]:
            link = backend / source.name
            link.unlink(missing_ok=True)
            link.symlink_to(source)

    def launch(self) -> Launch:
        s = self.settings
        repository = s.triton_model_repository.resolve()
        if not repository.is_dir():
            raise WorkbenchError(
                f"Triton model repository {repository} does not exist: set WORKBENCH_TRITON_MODEL_REPOSITORY"
            )
        # Python models run in this interpreter's environment: its bin dir first on PATH (the stub finds
        # site-packages through it) and its lib dir first on LD_LIBRARY_PATH (else pyenv builds fail
        # with "'_thread.RLock' object has no attribute '_recursion_count'").
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
        env.update(model_environment(s))  # the models import workbench: it is installed in this interpreter
        command = [
            str(pytriton_root() / "bin" / "tritonserver"), f"--model-repository={repository}",
            f"--backend-directory={self.data_dir / 'backends'}",
            f"--http-address={s.host}", f"--http-port={s.triton_http_port}",
            f"--grpc-address={s.host}", f"--grpc-port={s.triton_grpc_port}",
            f"--metrics-address={s.host}", f"--metrics-port={s.triton_metrics_port}",
            "--exit-on-error=false", "--log-verbose=0", *self._grpc_tls_flags(),
        ]
        return Launch(command, env=env, cwd=self.data_dir)

    def _grpc_tls_flags(self) -> list[str]:
        """gRPC over TLS with the stack's PEM files (server authentication only: clients need no certificate)."""
        if not self.settings.tls:
            return []
        certs = Certificates(self.settings.certificates_dir())
        return ["--grpc-use-ssl=true", f"--grpc-server-cert={certs.server_cert}",
                f"--grpc-server-key={certs.server_key}", f"--grpc-root-cert={certs.ca_cert}"]

    def ports(self) -> dict[str, int]:
        s = self.settings
        return {"http": s.triton_http_port, "grpc": s.triton_grpc_port, "metrics": s.triton_metrics_port}

    def probe(self) -> Health:
        base = f"http://{self.settings.host}:{self.settings.triton_http_port}"
        ready = requests.get(f"{base}/v2/health/ready", timeout=self.settings.timeout_s)
        meta = requests.get(f"{base}/v2", timeout=self.settings.timeout_s).json()
        if ready.status_code != 200:
            return Health(False, meta.get("version", ""), f"not ready (HTTP {ready.status_code})")
        if self.settings.tls and not self._grpc_ready():
            return Health(False, meta.get("version", ""), "HTTP ready, gRPC over TLS not ready")
        return Health(True, version=meta.get("version", ""))

    def _grpc_ready(self) -> bool:
        """gRPC answers over TLS, verified against the stack's CA (a broken certificate shows up here)."""
        client = triton_client(self.settings, "grpc")
        try:
            return client.is_server_ready(client_timeout=self.settings.timeout_s)
        finally:
            client.close()
