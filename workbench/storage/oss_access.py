"""The OSS connector's `endpoint`, `cred_path` and `config_path`, applied: stores, log file and audit log.

`OssAccess` is what the OSS-style datasets and `S3Checkpoint` hold (picklable: paths and the parsed config,
never a secret). Per process it:

* builds a `Store` per bucket: without endpoint or credential file the settings' store (obstore); else a
  store over a boto3 client for that endpoint with the credential file's keys and token (`s3_client_at`;
  the file is read again for every store, since the connector's users refresh it in place, and an expired
  one is a WorkbenchError naming the file and the expiry);
* attaches a file handler at ``logLevel`` on ``logPath`` to the workbench loggers of the classes using it;
* writes the audit log at ``auditPath``: one tab-separated line per request, ``time op bucket/key bytes``
  (time in UTC, ISO 8601, ms), appended with one write per line so DataLoader workers can share the file.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage.base import Store
from workbench.storage.oss_config import OssConfig, load_config, load_credentials
from workbench.storage.s3 import s3_client_at
from workbench.storage.s3_native import NativeS3Store as S3Store  # the S3 store class the package exports

_AUDIT_LOGGERS: dict[str, logging.Logger] = {}
_LOCK = threading.Lock()


class _UTCFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def _file_handler(path: str, what: str, option: str, fmt: str) -> logging.FileHandler:
    file = Path(path).expanduser().absolute()
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(file, mode="a", encoding="utf-8")
    except OSError as exc:
        raise WorkbenchError(f"cannot open the {what} {file} ({exc.strerror or type(exc).__name__}): "
                             f"set {option} in the config file to a writable path") from None
    handler.setFormatter(_UTCFormatter(fmt))
    return handler


def _audit_logger(path: str) -> logging.Logger:
    key = str(Path(path).expanduser().absolute())
    with _LOCK:
        logger = _AUDIT_LOGGERS.get(key)
        if logger is None:
            logger = logging.getLogger(f"workbench.oss.audit.{len(_AUDIT_LOGGERS)}")
            logger.propagate = False
            logger.setLevel(logging.INFO)
            logger.addHandler(_file_handler(key, "audit log", "auditPath", "%(asctime)s\t%(message)s"))
            _AUDIT_LOGGERS[key] = logger
        return logger


def attach_log_file(logger: logging.Logger, config: OssConfig) -> None:
    """Send `logger`'s records at config.logLevel and above to config.logPath (once per logger and file)."""
    if config.log_path is None:
        return
    path = str(Path(config.log_path).expanduser().absolute())
    with _LOCK:
        handler = next((h for h in logger.handlers
                        if isinstance(h, logging.FileHandler) and h.baseFilename == path), None)
        if handler is None:
            handler = _file_handler(path, "log file", "logPath",
                                    "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s")
            handler.setLevel(config.logging_level)
            logger.addHandler(handler)
        handler.setLevel(min(handler.level, config.logging_level))
        if logger.getEffectiveLevel() > config.logging_level:
            logger.setLevel(config.logging_level)


def _check_endpoint(endpoint: str) -> str:
    url = urlsplit(endpoint) if isinstance(endpoint, str) else None
    if url is None or url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/"):
        raise WorkbenchError(f"endpoint {endpoint!r} is not an S3 endpoint URL (want http(s)://host[:port])")
    return endpoint.rstrip("/")


class OssAccess:
    """endpoint + credential file + config file of one dataset or checkpoint (module docstring)."""

    def __init__(self, settings: Settings, endpoint: str | None = None, cred_path: str | os.PathLike | None = None,
                 config_path: str | os.PathLike | None = None, via_proxy: bool = False) -> None:
        self.settings = settings
        self.endpoint = _check_endpoint(endpoint) if endpoint is not None else None
        self.cred_path = None if cred_path is None else str(cred_path)
        self.config_path = None if config_path is None else str(config_path)
        self.via_proxy = via_proxy
        self.config: OssConfig | None = load_config(config_path) if config_path is not None else None
        if self.cred_path is not None:
            load_credentials(self.cred_path)  # a missing, malformed or expired file fails here, not in a worker

    def __repr__(self) -> str:
        return (f"OssAccess(endpoint={self.endpoint!r}, cred_path={self.cred_path!r}, "
                f"config_path={self.config_path!r})")

    @property
    def url(self) -> str:
        return self.endpoint or self.settings.s3_endpoint(self.via_proxy)

    def store(self, bucket: str, connections: int) -> Store:
        """A store for `bucket` at this endpoint with these credentials (made per process by the callers)."""
        if self.cred_path is None and (self.endpoint is None or self.endpoint == self.settings.s3_endpoint(
                self.via_proxy)):
            return S3Store(self.settings, bucket, "", self.via_proxy, connections=connections)
        if self.cred_path is not None:
            creds = load_credentials(self.cred_path)
            access, secret = creds.access_key_id, creds.access_key_secret.get_secret_value()
            token = creds.security_token.get_secret_value() if creds.security_token is not None else None
        else:
            access, secret = self.settings.s3_credentials()
            token = None
        tls = self.url.startswith("https://") and self.settings.tls
        client = s3_client_at(self.url, access, secret, region=self.settings.s3_region,
                              timeout_s=self.settings.timeout_s, max_pool_connections=connections,
                              verify=str(self.settings.ca_file()) if tls else None, session_token=token)
        return S3Store.from_client(client, bucket)

    def attach_logs(self, logger: logging.Logger) -> None:
        """Apply logLevel/logPath to `logger` (idempotent; call again in each new process)."""
        if self.config is not None:
            attach_log_file(logger, self.config)

    def audit(self, op: str, bucket: str, key: str, size: int, detail: str = "") -> None:
        """One audit line (no-op without auditPath)."""
        if self.config is None or self.config.audit_path is None:
            return
        name = f"{bucket}/{key}".replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        line = f"{op}\t{name}\t{size}"
        _audit_logger(self.config.audit_path).info(f"{line}\t{detail}" if detail else line)
