"""The Ignite loader's client modes: asyncio (default) and sync clients, fast and pyignite decoding, all equal.

Every mode passes the loader contract checks (exact multiset of ids, byte-identical payloads, ranks,
reproducible shuffles, DataLoader workers); the fast decoding gives exactly what pyignite decodes on
every layout (binary with int or blob labels, SQL tables); the asyncio client fails with the sync one's lines.
DataLoader workers: the contract test runs the default (aio) with 1, 2 and 4 workers.
"""

from __future__ import annotations

import socket
import uuid

import pytest
from loader_checks import (
    check_one_epoch_is_exactly_the_split,
    check_shuffled_epochs_differ,
    check_two_ranks_never_overlap,
)

from workbench.backends import make_backend
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader

pytestmark = pytest.mark.services

MODES = [{"client": "aio"}, {"client": "aio", "decode": "pyignite"}, {"client": "aio", "partition_aware": True},
         {"client": "sync"}, {"client": "sync", "decode": "pyignite"}]
IDS = ["aio-fast", "aio-pyignite", "aio-partition-aware", "sync-fast", "sync-pyignite"]


@pytest.fixture(scope="module")
def dataset(stack):
    name = f"clients_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(48, mean_kb=8, seed=17, name=name)
    backend = make_backend("ignite", stack, name)
    ingest(source, backend, progress=False)
    yield name, {str(s.id): s for s in source}
    backend.drop()


def _loader_with(mode: dict, monkeypatch) -> str:
    """A registry name for the ignite loader with `mode` as its config's defaults (what the checks construct)."""
    from pydantic import create_model

    from workbench.loaders.ignite import IgniteLoader, IgniteLoaderConfig
    from workbench.loaders.registry import LOADERS

    fields = {k: (IgniteLoaderConfig.model_fields[k].annotation, v) for k, v in mode.items()}
    config = create_model("ModeConfig", __base__=IgniteLoaderConfig, **fields)
    loader = type("ModeIgniteLoader", (IgniteLoader,), {"Config": config, "benchmarked_by_default": False})
    name = "ignite-" + "-".join(f"{k}-{v}" for k, v in mode.items())
    monkeypatch.setitem(LOADERS, name, loader)
    return name


@pytest.fixture(params=MODES, ids=IDS)
def mode(request, monkeypatch):
    return _loader_with(request.param, monkeypatch)


def test_every_mode_reads_exactly_the_split(stack, dataset, mode):
    check_one_epoch_is_exactly_the_split(stack, mode, *dataset)
    check_two_ranks_never_overlap(stack, mode, *dataset)
    check_shuffled_epochs_differ(stack, mode, dataset[0], reproducible=True)


@pytest.mark.parametrize("layout", [{"mode": "sql"}, {"label_type": "blob", "kind": "segmentation"}, {}])
@pytest.mark.parametrize("client", ["aio", "sync"])
def test_fast_decoding_equals_pyignite_on_every_layout(stack, layout, client):
    options = dict(layout)
    kind = options.pop("kind", "classification")
    name = f"clients_{uuid.uuid4().hex[:8]}"
    backend = make_backend("ignite", stack, name, **options)
    ingest(SyntheticSource(20, mean_kb=6, seed=5, name=name, kind=kind), backend, progress=False)
    try:
        label_type = options.get("label_type", "int")
        read = {}
        for decode in ("fast", "pyignite"):
            with make_loader("ignite", stack, dataset=name, client=client, decode=decode, label_type=label_type,
                             get_batch=7, shuffle=False) as loader:
                read[decode] = [(i.key, i.label, i.data) for i in loader]
        assert len(read["fast"]) == 20 and read["fast"] == read["pyignite"]
    finally:
        backend.drop()


def test_fast_decoding_keeps_the_wrong_label_type_error(stack, dataset):
    with pytest.raises(WorkbenchError, match="label_type is blob"), \
            make_loader("ignite", stack, dataset=dataset[0], label_type="blob") as loader:
        list(loader)


@pytest.mark.parametrize("client", ["aio", "sync"])
def test_unreachable_server_is_one_line_naming_host_and_port(stack, dataset, client):
    from workbench.clients.ignite import Endpoint

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once closed
    with make_loader("ignite", stack, dataset=dataset[0], client=client, retries=0) as loader:
        loader.split_keys()  # the ids come over the real port, then every read goes to the dead one
        loader.endpoint = Endpoint("127.0.0.1", port, timeout_s=3, dev_mode=True)
        if loader._clients is not None:  # the sync clients keep the endpoint they were made with
            loader._clients.close()
            loader._clients = None
        with pytest.raises(WorkbenchError, match=rf"cannot reach Ignite at 127\.0\.0\.1:{port}: connection refused"):
            list(loader)
