"""S3 through boto3: the only place an S3 client is built and an S3 error is read.

`s3_client`/`s3_client_at` build clients with timeouts, path-style addressing and, with settings.tls,
verification against the stack's CA only; `BotoS3Store` is the `Store` over ``s3://bucket/prefix/`` on
boto3. `workbench.storage.S3Store` is its obstore subclass (`s3_native`), which keeps boto3 only for
buckets, presigned URLs, numbered multipart uploads and user-supplied clients.
Every botocore failure leaves this module as a one-line WorkbenchError (access denied -> which keys to
check; no bucket -> ingest first; unreachable -> is the stack up; TLS mismatch -> which setting).
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from workbench.clients.tls import STACK_CA_HINT, speaks_tls, ssl_reason, verify_reason
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage.base import MultipartUpload, ObjectInfo, Store

MULTIPART_THRESHOLD = 8 * 2**20
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ACCESS_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden",
                 "InvalidToken", "ExpiredToken", "InvalidSecurity"}
_MISSING_CODES = ("404", "NoSuchKey", "NotFound")


def s3_client(settings: Settings, via_proxy: bool = False, max_pool_connections: int = 64,
              endpoint: str | None = None):
    """A client for the configured S3 (login from settings); with settings.tls it trusts the stack's CA only.

    `endpoint` names one node of a distributed MinIO (default: settings.s3_endpoint, node 0)."""
    settings.check_credentials()
    access, secret = settings.s3_credentials()
    return s3_client_at(endpoint or settings.s3_endpoint(via_proxy), access, secret, region=settings.s3_region,
                        timeout_s=settings.timeout_s, max_pool_connections=max_pool_connections,
                        verify=str(settings.ca_file()) if settings.tls else None)


def s3_client_at(url: str, access_key: str | None, secret_key: str | None, region: str = "us-east-1",
                 timeout_s: float = 10.0, max_pool_connections: int = 64, verify: bool | str | None = None,
                 session_token: str | None = None, config: Any = None):
    """A boto3 client for any endpoint (path-style, timeouts, standard retries); TLS failures explained.

    `verify` is boto3's: None/True for the system's CAs, False for none, or a CA bundle path.
    `config` (a botocore Config) replaces the default one, for clients rebuilt from another client's.
    """
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        aws_session_token=session_token, region_name=region, verify=verify,
        config=config or Config(
            connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=max_pool_connections, s3={"addressing_style": "path"},
        ),
    )
    explain_s3_tls_errors(client, timeout_s)
    return client


def explain_s3_tls_errors(client, timeout_s: float) -> None:
    """Make a TLS failure of any call on `client` one clear, permanent WorkbenchError (botocore's event hooks).

    Why hooks: every caller (stores, loaders, checkpoints, the probe) gets the same message without
    wrapping each call; botocore files an SSLError among its transient connection errors otherwise.
    """
    handler = _S3TLSErrors(client.meta.endpoint_url, timeout_s)
    client.meta.events.register("after-call-error.s3", handler)
    client.meta.events.register("after-call.s3", handler.answered)

class _S3TLSErrors:
    """The after-call-error handler: untrusted certificate, https to a plain server, http to a TLS-only one."""

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.checked_plain = False  # http endpoints: probe for TLS once, on the first failed call

    def __call__(self, exception: BaseException | None = None, **_) -> None:
        from botocore.exceptions import EndpointConnectionError, SSLError

        url = urlsplit(self.endpoint)
        if isinstance(exception, SSLError):
            text = str(exception)
            if "CERTIFICATE_VERIFY_FAILED" in text:
                raise WorkbenchError(
                    f"cannot verify the TLS certificate of S3 at {self.endpoint} ({verify_reason(text)}): set "
                    f"WORKBENCH_TLS_CA_FILE to the CA that signed it ({STACK_CA_HINT})") from None
            raise WorkbenchError(
                f"TLS handshake with S3 at {self.endpoint} failed ({ssl_reason(text)}): the server does not speak "
                "TLS there; set WORKBENCH_TLS=0 or start MinIO with --certs-dir") from None
        if url.scheme == "http" and exception is not None and not self.checked_plain \
                and not isinstance(exception, EndpointConnectionError):  # refused: nobody there to probe
            self.checked_plain = True
            if speaks_tls(url.hostname or "", url.port or 80, min(self.timeout_s, 3.0)):
                raise self.https_only() from None

    def https_only(self) -> WorkbenchError:
        return WorkbenchError(
            f"S3 at {self.endpoint} accepts HTTPS only: set WORKBENCH_TLS=1 and WORKBENCH_TLS_CA_FILE to its CA "
            f"({STACK_CA_HINT})")

    def answered(self, http_response=None, **_) -> None:
        """The after-call handler: Go's TLS servers may answer a plain request with this 400 instead."""
        if http_response is not None and http_response.status_code == 400 and \
                b"HTTP request to an HTTPS server" in (http_response.content or b""):
            raise self.https_only()


def parse_s3_uri(uri: str, scheme: str = "s3") -> tuple[str, str]:
    """``s3://bucket/some/key`` -> (bucket, "some/key"); the key may be empty (a whole bucket).

    `scheme` is the one an API's users write for these buckets (the OSS connector's names take ``oss://``).
    """
    start = f"{scheme}://"
    if not isinstance(uri, str) or not uri.startswith(start):
        raise WorkbenchError(f"not an {start} URI: {uri!r} (want {start}bucket/key)")
    bucket, _, key = uri[len(start):].partition("/")
    if not bucket:
        raise WorkbenchError(f"{scheme.upper()} URI {uri!r} has no bucket (want {start}bucket/key)")
    return bucket, key


def parse_object_uri(uri: str, scheme: str = "s3") -> tuple[str, str]:
    """`parse_s3_uri` of a URI that names one object: no key, or a key ending in '/', is a WorkbenchError."""
    bucket, key = parse_s3_uri(uri, scheme)
    if not key or key.endswith("/"):
        raise WorkbenchError(f"{uri!r} names no object (want {scheme}://bucket/key)")
    return bucket, key


class BotoS3Store(Store):
    """Keys under ``s3://bucket/prefix/`` through one thread-safe boto3 client; errors become WorkbenchErrors."""

    native_reads = False  # only boto3 reads for this store (NativeS3Store: obstore and `s3_batch` too)

    def __init__(self, settings: Settings, bucket: str, prefix: str = "", via_proxy: bool = False,
                 connections: int = 64) -> None:
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise WorkbenchError(
                f"invalid S3 bucket name '{bucket}': use 3-63 lower-case letters, digits, '.' and '-' (set --bucket)"
            )
        self.settings = settings
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.via_proxy = via_proxy
        self.endpoint = settings.s3_endpoint(via_proxy)
        self.connections = connections
        self.where = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client = None
        self._lock = threading.Lock()

    @property
    def client(self):
        """One boto3 client (thread-safe), made on first use so options and names are checked before any I/O."""
        with self._lock:
            if self._client is None:
                self._client = s3_client(self.settings, self.via_proxy, max_pool_connections=self.connections)
            return self._client

    def full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turn botocore failures into one-line WorkbenchErrors that say what to fix."""
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            yield
        except ClientError as exc:
            raise self._client_error(exc, what) from exc
        except S3UploadFailedError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ClientError):
                raise self._client_error(cause, what) from exc
            text = str(exc)
            denied = next((code for code in sorted(_ACCESS_CODES) if code in text), None)
            if denied is not None:
                raise self._access_denied(what, denied) from exc
            raise WorkbenchError(f"S3 upload failed while {what}: {text.splitlines()[0]}") from exc
        except BotoConnectionError as exc:
            raise WorkbenchError(
                f"cannot reach S3 at {self.endpoint} while {what}: {type(exc).__name__}; "
                "is the stack up? (`workbench stack status`)"
            ) from exc
        except BotoCoreError as exc:
            raise WorkbenchError(f"S3 request failed while {what}: {exc}") from exc

    def _client_error(self, exc, what: str) -> WorkbenchError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _ACCESS_CODES or status == 403:
            return self._access_denied(what, code)
        if code in ("NoSuchBucket",) or (code == "404" and what.startswith("checking bucket")):
            return WorkbenchError(
                f"S3 bucket '{self.bucket}' does not exist at {self.endpoint}: ingest first (it creates the "
                "bucket unless create_bucket is off), or create it, or pass another --bucket"
            )
        message = str(error.get("Message", "")).splitlines()[0] if error.get("Message") else ""
        return WorkbenchError(f"S3 error while {what} in {self.where}: {code or status} {message}".rstrip())

    def _access_denied(self, what: str, code: str) -> WorkbenchError:
        return WorkbenchError(
            f"access denied by S3 at {self.endpoint} while {what} (bucket '{self.bucket}', {code}): "
            "check WORKBENCH_S3_ACCESS_KEY/WORKBENCH_S3_SECRET_KEY in the environment or .env"
        )

    def bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        with self.errors(f"checking bucket '{self.bucket}'"):
            try:
                self.client.head_bucket(Bucket=self.bucket)
                return True
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in ("404", "NoSuchBucket", "NotFound"):
                    return False
                raise

    def ensure_bucket(self, create: bool) -> None:
        from botocore.exceptions import ClientError

        if self.bucket_exists():
            return
        if not create:
            raise WorkbenchError(
                f"S3 bucket '{self.bucket}' does not exist at {self.endpoint} and create_bucket is off: "
                "create it, or allow create_bucket, or pass another --bucket"
            )
        with self.errors(f"creating bucket '{self.bucket}'"):
            try:
                self.client.create_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

    def put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        with self.errors(f"writing {self.full(key)}"):
            if len(data) > MULTIPART_THRESHOLD:
                from boto3.s3.transfer import TransferConfig

                config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD,
                                        multipart_chunksize=MULTIPART_THRESHOLD, max_concurrency=4)
                extra = {"Metadata": metadata} if metadata else None
                self.client.upload_fileobj(io.BytesIO(data), self.bucket, self.full(key), ExtraArgs=extra,
                                           Config=config)
            else:
                self.client.put_object(Bucket=self.bucket, Key=self.full(key), Body=data, Metadata=metadata or {})

    def get(self, key: str) -> tuple[bytes, dict[str, str]]:
        with self.errors(f"reading {self.full(key)}"), self.missing_is_keyerror(key):
            response = self.client.get_object(Bucket=self.bucket, Key=self.full(key))
            return response["Body"].read(), dict(response.get("Metadata") or {})

    def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        extra = {"IfMatch": etag} if etag else {}
        with self.errors(f"reading bytes {start}-{end - 1} of {self.full(key)}"), self.missing_is_keyerror(key):
            body = self.client.get_object(Bucket=self.bucket, Key=self.full(key), Range=f"bytes={start}-{end - 1}",
                                          **extra)["Body"]
            data = body.read()
        if len(data) != end - start:
            raise WorkbenchError(f"{self.where}/{key}: got {len(data)} bytes for range {start}-{end - 1} "
                                 "(the object changed or is shorter than expected)")
        return data

    def head(self, key: str) -> ObjectInfo:
        with self.errors(f"reading {self.full(key)}"), self.missing_is_keyerror(key):
            response = self.client.head_object(Bucket=self.bucket, Key=self.full(key))
        return ObjectInfo(int(response["ContentLength"]), response.get("ETag"))

    def multipart(self, key: str) -> MultipartUpload:
        return _S3Upload(self, key)

    @contextmanager
    def missing_is_keyerror(self, key: str) -> Iterator[None]:
        """A missing object (not a missing bucket) becomes KeyError: absence is the caller's to judge."""
        from botocore.exceptions import ClientError

        try:
            yield
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _MISSING_CODES:
                raise KeyError(key) from None
            raise

    def list(self, under: str = "") -> Iterator[tuple[str, int]]:
        base = self.full(under) if under else self.prefix
        start = f"{base}/" if base else ""
        with self.errors(f"listing {self.where}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start):
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.prefix) + 1:] if self.prefix else obj["Key"]
                    yield rel, obj["Size"]

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        with self.errors(f"deleting from {self.where}"):
            for i in range(0, len(keys), 1000):
                batch = [{"Key": self.full(k)} for k in keys[i:i + 1000]]
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def url(self, key: str, expires_s: int = 3600) -> str:
        """A presigned http GET URL (for webdataset, curl, DALI readers of http URLs)."""
        with self.errors(f"signing {self.full(key)}"):
            return self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": self.full(key)}, ExpiresIn=expires_s
            )

    @classmethod
    def from_client(cls, client: Any, bucket: str, prefix: str = "") -> BotoS3Store:
        """A store over a client the user made (cortx-style ``RemoteDataset(client, ...)``)."""
        store = cls(Settings.model_construct(), bucket, prefix)
        store.endpoint = client.meta.endpoint_url
        store._client = client
        return store


class _S3Upload(MultipartUpload):
    """An S3 multipart upload, started on the first part."""

    def __init__(self, store: BotoS3Store, key: str) -> None:
        self.store = store
        self.key = key
        self.uri = f"{store.where}/{key}"
        self._upload_id: str | None = None
        self._lock = threading.Lock()

    def _id(self) -> str:
        with self._lock:
            if self._upload_id is None:
                with self.store.errors(f"starting the upload of {self.uri}"):
                    self._upload_id = self.store.client.create_multipart_upload(
                        Bucket=self.store.bucket, Key=self.store.full(self.key))["UploadId"]
            return self._upload_id

    def put_part(self, number: int, data: bytes) -> str:
        upload_id = self._id()
        with self.store.errors(f"uploading part {number} of {self.uri}"):
            return self.store.client.upload_part(Bucket=self.store.bucket, Key=self.store.full(self.key),
                                                 UploadId=upload_id, PartNumber=number, Body=data)["ETag"]

    def complete(self, tags: list[tuple[int, str]]) -> None:
        parts = [{"PartNumber": n, "ETag": tag} for n, tag in sorted(tags)]
        with self.store.errors(f"completing the upload of {self.uri}"):
            self.store.client.complete_multipart_upload(
                Bucket=self.store.bucket, Key=self.store.full(self.key), UploadId=self._id(),
                MultipartUpload={"Parts": parts})

    def abort(self) -> None:
        with self._lock:
            upload_id, self._upload_id = self._upload_id, None
        if upload_id is not None:
            with self.store.errors(f"aborting the upload of {self.uri}"):
                self.store.client.abort_multipart_upload(Bucket=self.store.bucket, Key=self.store.full(self.key),
                                                         UploadId=upload_id)
