"""Ignite's node configuration (partition templates, client authentication), the backend's partition choice and
the one-line errors of a node that wants a client certificate: pure logic, no server."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from pydantic import SecretStr

from workbench.backends.ignite import IgniteBackend, IgniteOptions
from workbench.clients.ignite import (
    PARTITION_TEMPLATES,
    Endpoint,
    ignite_options,
    partition_template,
    settings_endpoint,
)
from workbench.clients.ignite.diagnose import _ignite_connect_error
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack.ignite import Ignite, ignite_xml

BEANS = "{http://www.springframework.org/schema/beans}"


def settings(tmp_path, **more) -> Settings:
    return Settings(_env_file=None).model_copy(update={"state_dir": tmp_path, "tls_dir": None, **more})


def templates(xml: str) -> dict[str, tuple[int, int]]:
    """name -> (backups, partitions) of every cache template in a node's XML."""
    found = {}
    for bean in ET.fromstring(xml).iter(f"{BEANS}bean"):
        if bean.get("class") != "org.apache.ignite.configuration.CacheConfiguration":
            continue
        props = {p.get("name"): p for p in bean.findall(f"{BEANS}property")}
        name = props["name"].get("value")
        if name.endswith("*"):
            args = props["affinity"].find(f"{BEANS}bean").findall(f"{BEANS}constructor-arg")
            assert args[0].get("value") == "false"
            found[name] = (int(props["backups"].get("value")), int(args[1].get("value")))
    return found


def ssl_properties(xml: str) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in ET.fromstring(xml).iter(f"{BEANS}property") if p.get("value")}


def test_every_partition_count_has_a_template_for_every_useful_backup_count(tmp_path):
    found = templates(ignite_xml(settings(tmp_path, ignite_nodes=3, ignite_backups=1), tmp_path,
                                 Ignite.health_cache, authentication=False))
    assert len(found) == len(PARTITION_TEMPLATES) * 3
    for n in PARTITION_TEMPLATES:
        for b in range(3):
            assert found[f"{partition_template(n, b)}*"] == (b, n)
    assert set(PARTITION_TEMPLATES) == {2**k for k in range(16)}  # RendezvousAffinityFunction allows <= 65000
    single = templates(ignite_xml(settings(tmp_path), tmp_path, Ignite.health_cache, authentication=False))
    assert set(single) == {f"{partition_template(n, 0)}*" for n in PARTITION_TEMPLATES}


def test_client_auth_switches_the_connector_and_its_trust_store(tmp_path):
    plain_tls = ssl_properties(ignite_xml(settings(tmp_path, tls=True), tmp_path, "h", authentication=False))
    assert plain_tls["sslClientAuth"] == "false" and plain_tls["trustStoreFilePath"].endswith("/truststore.p12")
    required = ssl_properties(ignite_xml(settings(tmp_path, tls=True, ignite_client_auth=True), tmp_path, "h",
                                         authentication=False))
    assert required["sslClientAuth"] == "true"
    assert required["trustStoreFilePath"] == str(tmp_path / "tls" / "client-truststore.p12")
    assert "sslClientAuth" not in ssl_properties(  # without TLS the setting has nothing to switch on
        ignite_xml(settings(tmp_path, ignite_client_auth=True), tmp_path, "h", authentication=False))


def test_the_stack_client_certificate_is_presented_only_when_the_node_requires_one(tmp_path):
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "ca.crt").write_text("a CA")  # only its presence is checked here
    base = settings(tmp_path, tls=True, ignite_username="u", ignite_password=SecretStr("p" * 12))
    assert "ssl_certfile" not in ignite_options(base) and settings_endpoint(base).certfile is None
    required = base.model_copy(update={"ignite_client_auth": True})
    options = ignite_options(required)
    assert options["ssl_certfile"] == str(tmp_path / "tls" / "client.crt")
    assert options["ssl_keyfile"] == str(tmp_path / "tls" / "client.key")
    endpoint = settings_endpoint(required)
    assert (endpoint.certfile, endpoint.keyfile) == (options["ssl_certfile"], options["ssl_keyfile"])
    own = settings_endpoint(required, certfile="/me.pem")  # a caller's certificate replaces the stack's, key too
    assert (own.certfile, own.keyfile) == ("/me.pem", None)


@pytest.mark.parametrize(("partitions", "mode", "cache"), [
    (1024, "binary", "DS1"), (16, "binary", "WB_P16_B0_DS1"), (16, "sql", "SQL_PUBLIC_DS1")])
def test_backend_cache_names_carry_the_template_prefix(tmp_path, partitions, mode, cache):
    backend = IgniteBackend(settings(tmp_path), "ds1", IgniteOptions(partitions=partitions, mode=mode))
    assert backend.cache_name == cache
    assert backend.template == (None if partitions == 1024 else partition_template(16, 0))


def test_backend_refuses_counts_without_a_template_and_names_without_its_prefix(tmp_path):
    with pytest.raises(WorkbenchError, match=r"1024 partitions or a count of the node's cache templates .*not 1000"):
        IgniteBackend(settings(tmp_path), "ds1", IgniteOptions(partitions=1000))
    with pytest.raises(WorkbenchError, match=r"must start with WB_P64_B1_"):
        IgniteBackend(settings(tmp_path), "ds1", IgniteOptions(partitions=64, backups=1, cache_name="MINE"))
    named = IgniteBackend(settings(tmp_path), "ds1", IgniteOptions(partitions=64, backups=1, cache_name="WB_P64_B1_X"))
    assert named.cache_name == "WB_P64_B1_X"


@pytest.mark.parametrize(("failure", "certfile", "expected"), [
    ("SSLError(1, '[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)')",
     None, r"^Ignite at h:1 requires a client certificate \(.*certificate required.*\): pass certfile and keyfile"),
    ("SSLError(1, '[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate (_ssl.c:2580)')",
     "/c.pem", r"^Ignite at h:1 refused the client certificate /c.pem \(.*bad certificate.*\): give one signed"),
    ("SSLError(9, '[SSL] PEM lib (_ssl.c:3917)')", "/c.pem",
     r"^cannot use the client certificate /c.pem / key /c.pem for Ignite at h:1 .*wrong cert_password"),
])
def test_certificate_refusals_are_one_permanent_line(failure, certfile, expected):
    options = Endpoint("h", 1, tls=True, certfile=certfile).client_kwargs()
    message, permanent = _ignite_connect_error("h:1", options, failure)
    assert permanent and "\n" not in message
    assert __import__("re").search(expected, message), message
