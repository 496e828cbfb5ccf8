"""workbench/clients/tls.py is the only module that builds an ssl.SSLContext (`client_context`): one place decides
every client's verify mode, host name check and TLS versions. Walks the source (AST), so comments and type hints
that name ssl.SSLContext do not count."""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

import pytest

import workbench
from workbench.clients.tls import client_context, present_certificate

ROOT = Path(workbench.__file__).parent
THE_PLACE = ROOT / "clients" / "tls.py"
BUILDERS = {"SSLContext", "create_default_context", "_create_unverified_context", "_create_default_https_context"}


def context_builds(source: str) -> list[int]:
    """Lines of `source` that call an ssl context constructor (ssl.X(...), a bare X(...) or an alias of ssl)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in BUILDERS:
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("source", [
    "import ssl\nctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)",
    "import ssl\nctx = ssl.create_default_context(cafile='ca.crt')",
    "from ssl import SSLContext\nctx = SSLContext()",
    "import ssl as s\nctx = s._create_unverified_context()",
])
def test_the_walk_finds_every_way_of_building_a_context(source):
    assert context_builds(source) == [2]


def test_a_type_hint_or_a_comment_is_not_a_build():
    assert context_builds("import ssl\n# ssl.SSLContext(...)\ndef f() -> ssl.SSLContext | None:\n    return None") == []


def test_only_clients_tls_builds_an_ssl_context():
    outside = {f"{path.relative_to(ROOT.parent)}:{line}"
               for path in sorted(ROOT.rglob("*.py")) if path != THE_PLACE
               for line in context_builds(path.read_text())}
    assert not outside, f"build SSL contexts with workbench.clients.tls.client_context, not at {sorted(outside)}"
    assert context_builds(THE_PLACE.read_text()), "clients/tls.py builds them (else this test checks nothing)"


def test_the_builder_verifies_by_default_and_probes_verify_nothing(tmp_path):
    strict = client_context()
    assert (strict.verify_mode, strict.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert strict.minimum_version in (ssl.TLSVersion.MINIMUM_SUPPORTED, ssl.TLSVersion.TLSv1_2)
    no_name = client_context(check_hostname=False)
    assert (no_name.verify_mode, no_name.check_hostname) == (ssl.CERT_REQUIRED, False)
    probe = client_context(verify=False, maximum_version=ssl.TLSVersion.TLSv1_2)
    assert (probe.verify_mode, probe.check_hostname) == (ssl.CERT_NONE, False)
    assert probe.maximum_version == ssl.TLSVersion.TLSv1_2 and probe.cert_store_stats()["x509_ca"] == 0


def test_the_builder_trusts_only_the_given_ca_and_loads_the_client_certificate(tmp_path):
    from workbench.config import Settings
    from workbench.stack.tls import ClientCertificates, ensure_certificates, ensure_client_certificates

    settings = Settings(_env_file=None).model_copy(update={"state_dir": tmp_path, "tls": True})
    ensure_certificates(settings)
    ensure_client_certificates(settings)
    client = ClientCertificates(settings.certificates_dir())
    context = client_context(settings.ca_file(), certfile=client.cert, keyfile=client.key)
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("organizationName", "workbench"),), (("commonName", "workbench local CA"),))]
    with pytest.raises(ssl.SSLError):  # a key that is not the certificate's: the chain is really loaded
        present_certificate(client_context(), client.cert, client.ca_key)
