"""MinIO, built from source with the Go toolchain through the Go module proxy; the stack's S3 server.

Root keys come from Settings (generated into .env; the well-known minioadmin pair is refused unless
dev_mode). With settings.tls, MinIO serves S3 and its console over TLS only: `--certs-dir` holds the
stack's server certificate as ``public.crt``/``private.key`` and its CA under ``CAs/`` (which MinIO's own
internal clients trust).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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

    def provision(self) -> None:
        stamp = (f"-X {MODULE}/cmd.Version={RELEASE_TIME} -X {MODULE}/cmd.ReleaseTag=DEVELOPMENT.{self.version}"
                 f" -X {MODULE}/cmd.CommitID={PSEUDO_VERSION.rsplit('-', 1)[1]}")
        go_install(self.name, self.home, f"{MODULE}@{PSEUDO_VERSION}", "minio", ldflags=stamp)

    def launch(self) -> Launch:
        self.settings.check_credentials()  # never minioadmin unless dev_mode, whoever calls launch
        access, secret = self.settings.s3_credentials()
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret,
               "MINIO_UPDATE": "off", "MINIO_BROWSER_LOGIN_ANIMATION": "off"}
        host = self.settings.host
        command = [str(self.home / "minio"), "server", str(self.data_dir / "data"), "--quiet",
                   "--address", f"{host}:{self.settings.s3_port}",
                   "--console-address", f"{host}:{self.settings.s3_console_port}"]
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
        response = s3_client(self.settings).list_buckets()
        server = response["ResponseMetadata"]["HTTPHeaders"].get("server", "MinIO")
        return Health(True, version=f"{server} {self.version}")
