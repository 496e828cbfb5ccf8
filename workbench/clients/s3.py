"""boto3 S3 clients with timeouts and, with settings.tls, MinIO verified against the stack CA; clear TLS errors."""

from __future__ import annotations

from urllib.parse import urlsplit

from workbench.clients.tls import STACK_CA_HINT, speaks_tls, ssl_reason, verify_reason
from workbench.config import Settings
from workbench.errors import WorkbenchError


def s3_client(settings: Settings, via_proxy: bool = False, max_pool_connections: int = 64):
    """A boto3 S3 client with timeouts; with settings.tls it verifies MinIO against the stack's CA only."""
    import boto3
    from botocore.config import Config

    settings.check_credentials()
    access, secret = settings.s3_credentials()
    client = boto3.client(
        "s3", endpoint_url=settings.s3_endpoint(via_proxy), aws_access_key_id=access,
        aws_secret_access_key=secret, region_name=settings.s3_region,
        verify=str(settings.ca_file()) if settings.tls else None,
        config=Config(
            connect_timeout=settings.timeout_s, read_timeout=settings.timeout_s,
            retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path"},
        ),
    )
    explain_s3_tls_errors(client, settings.timeout_s)
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
