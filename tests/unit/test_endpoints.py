"""External clusters' endpoint lists: parsing, one line for bad input, the lists win over host+port."""

from __future__ import annotations

import pytest

from workbench.clients.endpoints import (
    cassandra_hosts,
    cassandra_points,
    ignite_points,
    parse_address,
    s3_points,
    triton_address,
    triton_servers,
    where,
)
from workbench.config import Settings, rank_choice
from workbench.errors import WorkbenchError


def settings(**values) -> Settings:
    return Settings(_env_file=None, **values)


@pytest.mark.parametrize(("text", "expected"), [
    ("cass-0.cass.svc", ("cass-0.cass.svc", 9042)),
    ("10.0.0.5:19042", ("10.0.0.5", 19042)),
    (" 10.0.0.5 ", ("10.0.0.5", 9042)),
    ("[fd00::5]:9043", ("fd00::5", 9043)),
    ("[fd00::5]", ("fd00::5", 9042)),
    ("fd00::5", ("fd00::5", 9042)),
])
def test_addresses_take_a_default_port(text, expected):
    assert parse_address(text, 9042, "cassandra_contact_points") == expected


@pytest.mark.parametrize("text", ["", "host:", "host:0", "host:70000", "host:port", "http://host:9042",
                                  "[fd00::5", "[fd00::5]x", "a:b:c", "user@host"])
def test_a_bad_address_is_one_line_naming_the_setting(text):
    with pytest.raises(WorkbenchError) as error:
        parse_address(text, 9042, "cassandra_contact_points")
    message = str(error.value)
    assert "\n" not in message and message.startswith("WORKBENCH_CASSANDRA_CONTACT_POINTS: ")
    assert repr(text) in message


def test_without_lists_clients_use_host_and_the_proxy_or_server_port():
    s = settings()
    assert cassandra_points(s) == [("127.0.0.1", 9042)]
    assert cassandra_points(s, via_proxy=True) == [("127.0.0.1", 19042)]
    assert ignite_points(s, via_proxy=True) == [("127.0.0.1", 20800)]
    assert triton_address(s, "grpc", via_proxy=True) == ("127.0.0.1", 18001)
    assert s.s3_endpoint(via_proxy=True) == "http://127.0.0.1:19000"


def test_a_local_cluster_lists_every_node():
    s = settings(cassandra_nodes=3, ignite_nodes=2)
    assert cassandra_points(s) == [("127.0.0.1", 9042), ("127.0.0.2", 9042), ("127.0.0.3", 9042)]
    assert ignite_points(s, via_proxy=True) == [("127.0.0.1", 20800), ("127.0.0.2", 20800)]


def test_lists_win_and_ignore_the_proxy():
    s = settings(stack="external", cassandra_contact_points=["c0.svc", "c1.svc:9042"],
                 ignite_addresses=["i0.svc:10800", "i1.svc"], s3_endpoints=["https://minio.svc"],
                 triton_urls=["grpc://t0.svc:9001"])
    assert cassandra_points(s, via_proxy=True) == [("c0.svc", 9042), ("c1.svc", 9042)]
    assert cassandra_hosts(s, via_proxy=True) == (["c0.svc", "c1.svc"], 9042)
    assert ignite_points(s, via_proxy=True) == [("i0.svc", 10800), ("i1.svc", 10800)]
    assert s.s3_endpoint(via_proxy=True) == "https://minio.svc"
    assert s3_points(s) == [("https://minio.svc", ("minio.svc", 443))]
    assert triton_address(s, "grpc", via_proxy=True) == ("t0.svc", 9001)
    assert triton_address(s, "http") == ("t0.svc", 8000)  # the other protocol: same host, its usual port


def test_the_drivers_need_one_port_for_the_whole_ring():
    s = settings(cassandra_contact_points=["c0:9042", "c1:9043"])
    with pytest.raises(WorkbenchError, match=r"different ports \(c0:9042, c1:9043\)"):
        cassandra_hosts(s)


def test_triton_entries_name_their_protocol():
    servers = triton_servers(settings(triton_urls=["t0:8100", "http://t1", "grpc://t2:8201/"]))
    assert [(t.host, t.listed, t.ports) for t in servers] == [
        ("t0", "http", {"http": 8100, "grpc": 8001}), ("t1", "http", {"http": 8000, "grpc": 8001}),
        ("t2", "grpc", {"http": 8000, "grpc": 8201})]
    with pytest.raises(WorkbenchError, match="WORKBENCH_TRITON_URLS: 'https://t0'"):
        triton_servers(settings(triton_urls=["https://t0"]))


@pytest.mark.parametrize("url", ["minio.svc:9000", "s3://bucket", "https://minio.svc/bucket", "http://h:x"])
def test_a_bad_s3_endpoint_is_one_line(url):
    with pytest.raises(WorkbenchError, match=r"^WORKBENCH_S3_ENDPOINTS: .* endpoint URL|port must be"):
        s3_points(settings(s3_endpoints=[url]))


def test_each_client_rank_takes_its_own_endpoint(monkeypatch):
    s = settings(s3_endpoints=["http://m0:9000", "http://m1:9000"], triton_urls=["t0", "t1", "t2"])
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert s.s3_endpoint() == "http://m0:9000" and triton_address(s, "http") == ("t0", 8000)
    monkeypatch.setenv("RANK", "3")
    assert s.s3_endpoint() == "http://m1:9000" and triton_address(s, "http") == ("t0", 8000)
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    assert rank_choice(["a", "b", "c"]) == "c"


def test_where_brackets_ipv6():
    assert where([("fd00::5", 9042), ("c1", 9042)]) == "[fd00::5]:9042, c1:9042"
