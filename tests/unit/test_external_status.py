"""`stack status` of an external stack without servers: refused and silent endpoints each get one line naming
host:port, and the probes end by their timeouts (a silent server accepts connections and never answers)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack import external


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def refused_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]  # closed on exit: nothing listens there any more


def external_settings(port: int) -> Settings:
    where = f"127.0.0.1:{port}"
    return Settings(_env_file=None, stack="external", timeout_s=1, s3_access_key="wb-test",
                    s3_secret_key="not-a-secret", cassandra_contact_points=[where], s3_endpoints=[f"http://{where}"],
                    ignite_addresses=[where], triton_urls=[f"http://{where}", f"grpc://{where}"])


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_every_endpoint_that_does_not_answer_is_named(kind, silent_port):
    port = silent_port if kind == "silent" else refused_port()
    with ThreadPoolExecutor(1) as pool:  # a guard against a hang, not a speed check
        rows = pool.submit(external.status, external_settings(port)).result(timeout=120)
    assert [r.service for r in rows] == ["cassandra", "s3", "ignite", "triton", "triton-2"]
    for row in rows:
        assert not row.healthy and row.pid is None
        assert row.address == f"127.0.0.1:{port}" and f"127.0.0.1:{port}" in row.detail
        assert "\n" not in row.detail
    line = external.unreachable(rows)
    assert line.startswith("not answering: cassandra 127.0.0.1:") and f"triton-2 127.0.0.1:{port}" in line


def test_services_and_nodes_can_be_chosen_by_name():
    settings = Settings(_env_file=None, stack="external", cassandra_contact_points=["c0", "c1"])
    names = [(t.node_name, t.address) for t in external.targets(settings)]
    assert names[:2] == [("cassandra", ("c0", 9042)), ("cassandra-2", ("c1", 9042))]
    assert [t.settings.cassandra_contact_points for t in external.targets(settings)[:2]] == [["c0:9042"], ["c1:9042"]]
    with pytest.raises(WorkbenchError, match=r"unknown service.*cassandra-3.*choose from"):
        external.status(settings, ["cassandra-3"])
