"""The OSS connector's two JSON files, parsed: the credential file (`cred_path`) and the config file (`config_path`).

Pure logic: bytes in, a frozen model or one `WorkbenchError` line out that names the file, the field and what
to do. The access key secret and the security token are `SecretStr`s: they never appear in an error, a repr
or a log line (validation errors are rebuilt from their location and message, never from the input value).

Why in the storage layer: the OSS-style datasets (compat) and the checkpoint reader/writer (checkpoints) both
read these files, and the import contract forbids those two layers to import each other.

Credential file (as the OSS connector writes it)::

    {"AccessKeyId": "...", "AccessKeySecret": "...", "SecurityToken": "...", "Expiration": "2024-08-02T15:04:05Z"}

SecurityToken and Expiration are optional; an Expiration without a zone is UTC; other keys are ignored.

Config file: ``logLevel`` (0 DEBUG, 1 INFO, 2 WARN, 3 ERROR; default 1), ``logPath``, ``auditPath`` (no
default here: the connector's /var/log/oss-connector/... needs root, so no file is written unless named),
``datasetConfig.prefetchConcurrency`` (24), ``datasetConfig.prefetchWorker`` (2),
``checkpointConfig.prefetchConcurrency`` (24), ``checkpointConfig.prefetchWorker`` (4),
``checkpointConfig.uploadConcurrency`` (64). Unknown keys are an error that lists the valid ones.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from workbench.errors import WorkbenchError

LOG_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}
MAX_FILE_BYTES = 1 << 20  # both files are a few hundred bytes; a bigger one is the wrong file
MAX_CONCURRENCY = 1024
CREDENTIAL_FIELDS = "AccessKeyId, AccessKeySecret, optional SecurityToken and Expiration (ISO 8601)"


class OssCredentials(BaseModel):
    """One credential file's content; `expiration` is timezone-aware (UTC when the file gives no zone)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore", populate_by_name=True)

    access_key_id: str = Field(alias="AccessKeyId", min_length=1)
    access_key_secret: SecretStr = Field(alias="AccessKeySecret")
    security_token: SecretStr | None = Field(None, alias="SecurityToken")
    expiration: datetime | None = Field(None, alias="Expiration")

    @field_validator("access_key_secret")
    @classmethod
    def _not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @field_validator("expiration")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    def expired(self, now: datetime) -> bool:
        return self.expiration is not None and self.expiration <= now


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", populate_by_name=True)


class DatasetConfig(_Section):
    prefetch_concurrency: int = Field(24, alias="prefetchConcurrency", ge=1, le=MAX_CONCURRENCY)
    prefetch_worker: int = Field(2, alias="prefetchWorker", ge=1, le=MAX_CONCURRENCY)


class CheckpointConfig(_Section):
    prefetch_concurrency: int = Field(24, alias="prefetchConcurrency", ge=1, le=MAX_CONCURRENCY)
    prefetch_worker: int = Field(4, alias="prefetchWorker", ge=1, le=MAX_CONCURRENCY)
    upload_concurrency: int = Field(64, alias="uploadConcurrency", ge=1, le=MAX_CONCURRENCY)


class OssConfig(_Section):
    """One config file's content (defaults as the OSS connector documents them, except the two paths)."""

    log_level: int = Field(1, alias="logLevel", ge=0, le=3)
    log_path: str | None = Field(None, alias="logPath", min_length=1)
    audit_path: str | None = Field(None, alias="auditPath", min_length=1)
    dataset: DatasetConfig = Field(default_factory=DatasetConfig, alias="datasetConfig")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, alias="checkpointConfig")

    @property
    def logging_level(self) -> int:
        return LOG_LEVELS[self.log_level]


_SECTIONS: dict[tuple[str, ...], type[BaseModel]] = {
    (): OssConfig, ("datasetConfig",): DatasetConfig, ("checkpointConfig",): CheckpointConfig,
}


def _keys(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or name for name, f in model.model_fields.items())


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(_key(p) for p in loc)


def _key(part: Any) -> str:
    """A key from the file as printable text: its control characters escaped, so the error stays one line."""
    return str(part).encode("unicode_escape").decode("ascii")


def _one_line(exc: ValidationError, what: str, valid: str) -> WorkbenchError:
    """The first validation error as one line: location and pydantic's message, never the input value."""
    first = exc.errors(include_input=False, include_url=False)[0]
    kind, loc = first["type"], tuple(first["loc"])
    if kind == "json_invalid":
        return WorkbenchError(f"{what} is not valid JSON ({first['msg'].removeprefix('Invalid JSON: ')}): "
                              f"write one JSON object with {valid}")
    if kind == "missing":
        return WorkbenchError(f"{what} has no field '{_where(loc)}': it needs {valid}")
    if kind == "extra_forbidden":
        section = _SECTIONS.get(loc[:-1])
        inside = f" in {_where(loc[:-1])}" if loc[:-1] else ""
        keys = _keys(section) if section is not None else valid
        return WorkbenchError(f"{what}: unknown key '{_key(loc[-1])}'{inside}: valid keys are {keys}")
    if not loc:
        return WorkbenchError(f"{what}: {first['msg'].lower()}: write one JSON object with {valid}")
    return WorkbenchError(f"{what}: field '{_where(loc)}': {first['msg']}")


def parse_credentials(data: bytes | str, name: str = "credential file") -> OssCredentials:
    """The credentials in `data` (JSON); any problem is one WorkbenchError naming `name` and the field."""
    try:
        return OssCredentials.model_validate_json(data)
    except ValidationError as exc:
        raise _one_line(exc, f"OSS credential file {name}", CREDENTIAL_FIELDS) from None


def check_not_expired(credentials: OssCredentials, name: str, now: datetime | None = None) -> OssCredentials:
    """The credentials, or a WorkbenchError naming the file and the expiry when they have expired."""
    now = now or datetime.now(UTC)
    if credentials.expired(now):
        assert credentials.expiration is not None
        raise WorkbenchError(
            f"OSS credential file {name} expired at {credentials.expiration.isoformat()} (now "
            f"{now.replace(microsecond=0).isoformat()}): write fresh credentials to it before the Expiration")
    return credentials


def parse_config(data: bytes | str, name: str = "config file") -> OssConfig:
    """The config in `data` (JSON); any problem is one WorkbenchError naming `name` and the key."""
    try:
        return OssConfig.model_validate_json(data)
    except ValidationError as exc:
        raise _one_line(exc, f"OSS config file {name}", f"keys among {_keys(OssConfig)}") from None


def _read(path: str | PathLike, what: str, option: str) -> bytes:
    file = Path(path)
    try:
        with file.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise WorkbenchError(f"{what} {file} does not exist: write it or pass another {option}") from None
    except OSError as exc:
        raise WorkbenchError(f"cannot read {what} {file} ({exc.strerror or type(exc).__name__}): "
                             f"check it or pass another {option}") from None
    if len(data) > MAX_FILE_BYTES:
        raise WorkbenchError(f"{what} {file} is over {MAX_FILE_BYTES} bytes: is {option} the right file?")
    return data


def load_credentials(path: str | PathLike, now: datetime | None = None) -> OssCredentials:
    """The credential file at `path`, checked for expiry (read again each time: the file is refreshed in place)."""
    return check_not_expired(parse_credentials(_read(path, "OSS credential file", "cred_path"), str(path)),
                             str(path), now)


def load_config(path: str | PathLike) -> OssConfig:
    """The config file at `path`."""
    return parse_config(_read(path, "OSS config file", "config_path"), str(path))
