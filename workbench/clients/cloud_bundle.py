"""Secure-connect bundles (cassandra-dali-plugin's `cloud_config`, DataStax Astra's "secure connect bundle").

A bundle is a zip holding config.json (the metadata service's `host` and `port`, optionally `keyspace`,
`localDC`, `username`/`password`, `cql_port`), the CA that signed the servers' certificates (`ca.crt`) and
the client's certificate and key (`cert`, `key`). Both drivers take the bundle itself (the Python driver's
`Cluster(cloud={'secure_connect_bundle': path})`, acsylla's `cloud_secure_connection_bundle`): they ask
the metadata service (https://host:port/metadata, with the client certificate) for the SNI proxy's address
and the nodes' host ids, then open every connection to that proxy over TLS, naming the node in SNI. So a
bundle reaches a cluster behind such a proxy (Astra, or anything that serves the same metadata), never a
plain node: a plain node's address and TLS files are what cassandra_ips and ssl_* are for.

Why read it here as well: the drivers report a bad bundle late and vaguely (the C++ driver only in its log,
the Python driver as "Unable to open the zip file"), so the loaders check it first and name the file and
what is wrong in one line.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

BUNDLE_KEY = "secure_connect_bundle"  # the plugin's and the Python driver's cloud_config key
CONFIG_FILE = "config.json"
TLS_FILES = ("ca.crt", "cert", "key")


@dataclass(frozen=True)
class CloudBundle:
    """A checked bundle: its path and what config.json says."""

    path: Path
    host: str  # the metadata service
    port: int
    keyspace: str | None
    local_dc: str | None
    has_login: bool  # config.json carries username and password (the drivers then log in with them)

    def metadata_url(self) -> str:
        return f"https://{self.host}:{self.port}/metadata"

    def describe(self) -> str:
        """Where, for messages: the metadata service and the bundle."""
        return f"{self.host}:{self.port} (secure-connect bundle {self.path})"


def bundle_path(cloud_config: str | Path | dict[str, Any]) -> Path:
    """The bundle's path from the plugin's `{'secure_connect_bundle': path}` or from a bare path."""
    if isinstance(cloud_config, dict):
        if BUNDLE_KEY not in cloud_config:
            raise WorkbenchError(f"cloud_config has no '{BUNDLE_KEY}' (keys: {', '.join(map(str, cloud_config))}): "
                                 f"give {{'{BUNDLE_KEY}': '/path/to/secure-connect-<db>.zip'}}")
        cloud_config = cloud_config[BUNDLE_KEY]
    return Path(str(cloud_config)).expanduser()


def read_bundle(cloud_config: str | Path | dict[str, Any]) -> CloudBundle:
    """The bundle checked: a zip with config.json (host, port) and ca.crt, cert, key; else one line naming
    the file and what is wrong."""
    path = bundle_path(cloud_config)
    what = f"secure-connect bundle {path}"
    if not path.is_file():
        raise WorkbenchError(f"{what} does not exist: give the path of the bundle's zip (cloud_config)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            missing = [n for n in (CONFIG_FILE, *TLS_FILES) if n not in names]
            if missing:  # the drivers look for these names at the top of the zip
                raise WorkbenchError(f"{what} lacks {', '.join(missing)} at its top level: a bundle holds "
                                     f"{CONFIG_FILE}, {', '.join(TLS_FILES)}; download it again")
            raw = archive.read(CONFIG_FILE)
            not_pem = [n for n in TLS_FILES if b"-----BEGIN " not in archive.read(n)]
    except zipfile.BadZipFile:
        raise WorkbenchError(f"{what} is not a zip file: give the secure-connect bundle as downloaded") from None
    except OSError as exc:
        raise WorkbenchError(f"cannot read {what}: {exc.strerror or exc}") from None
    if not_pem:
        raise WorkbenchError(f"{what}: {', '.join(not_pem)} {'is' if len(not_pem) == 1 else 'are'} not PEM "
                             "(ca.crt and cert: certificates, key: the client's private key); download it again")
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkbenchError(f"{what}: {CONFIG_FILE} is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise WorkbenchError(f"{what}: {CONFIG_FILE} is not a JSON object")
    host, port = config.get("host"), config.get("port")
    if not isinstance(host, str) or not host:
        raise WorkbenchError(f"{what}: {CONFIG_FILE} has no 'host' (the metadata service's address)")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise WorkbenchError(f"{what}: {CONFIG_FILE} has no valid 'port' (the metadata service's port), got {port!r}")
    return CloudBundle(path, host, port, _text(config.get("keyspace")), _text(config.get("localDC")),
                       bool(config.get("username")) and bool(config.get("password")))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
