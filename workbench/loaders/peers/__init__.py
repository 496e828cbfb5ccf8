"""Peers: other projects' loaders on our data, registered like ours so they are measured side by side.

TLS: the peers make their own connections (curl for webdataset, boto3 sessions inside mosaic streaming,
the AWS CRT for s3torchconnector), and none takes a CA argument; each reads a CA bundle from an
environment variable instead. `trust_bundle` gives them one file with the system's CAs plus the stack's.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

from workbench.config import Settings
from workbench.loaders.base import Loader

BUNDLE_NAME = "system-and-stack-ca.pem"


class Peer(Loader):
    """Another project's reader over our data: registered like ours, measured beside ours when named, never by
    default (`workbench bench loaders` without names measures ours)."""

    benchmarked_by_default = False


def trust_bundle(settings: Settings) -> Path:
    """A PEM bundle of the system's trusted CAs plus the stack's CA (settings.ca_file()), rewritten when stale.

    Why both: the variables the peers read (CURL_CA_BUNDLE, AWS_CA_BUNDLE, SSL_CERT_FILE) replace the
    system store for the whole process; with both, other HTTPS connections keep working.
    """
    stack_ca = settings.ca_file()
    bundle = settings.state_dir / "tls-trust" / BUNDLE_NAME
    system = _system_bundle()
    sources = [p for p in (system, stack_ca) if p is not None]
    if bundle.is_file() and all(bundle.stat().st_mtime >= p.stat().st_mtime for p in sources):
        return bundle
    bundle.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(p.read_text().rstrip("\n") + "\n" for p in sources)
    with tempfile.NamedTemporaryFile("w", dir=bundle.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, bundle)
    bundle.chmod(0o644)
    return bundle


def _system_bundle() -> Path | None:
    """The CA file OpenSSL would use (Debian: /etc/ssl/certs/ca-certificates.crt), else certifi's."""
    compiled_in = ssl.get_default_verify_paths().openssl_cafile  # not SSL_CERT_FILE, which may be our bundle
    if compiled_in and Path(compiled_in).is_file():
        return Path(compiled_in).resolve()
    try:
        import certifi
    except ImportError:
        return None
    return Path(certifi.where())


def trust_stack_ca(settings: Settings, variable: str) -> None:
    """With settings.tls, point the environment `variable` a peer's TLS client reads at `trust_bundle`."""
    if settings.tls:
        os.environ[variable] = str(trust_bundle(settings))
