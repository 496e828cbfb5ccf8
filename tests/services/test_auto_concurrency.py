"""concurrency="auto" against the real servers: 50 ms of round trip (toxiproxy) opens a wider window than 0 ms.

Asserted on the window the loaders and `bench loaders` record, never on a timing bound.
"""

import pytest

from workbench.backends import backend_class, make_backend
from workbench.bench.loaders import MOST_RUNS_PER_ROUND, MOST_WARMUP_EPOCHS, bench_loaders
from workbench.concurrency import AUTO_START
from workbench.data import SyntheticSource
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.loaders.s3_shards import MAX_PARALLEL_SHARDS
from workbench.net.toxiproxy import Toxiproxy

pytestmark = pytest.mark.services

COUNT = 600


@pytest.fixture(scope="module")
def dataset(stack):
    import uuid

    name = f"auto_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(COUNT, mean_kb=8, seed=5)
    backends = [make_backend(b, stack, name) for b in ("s3-objects", "cassandra")]
    for backend in backends:
        ingest(source, backend, progress=False, check_images=False)
    yield name, sorted(str(s.id) for s in source if s.split == "train")
    for backend in backends:
        backend.drop()


def _epoch(stack, loader: str, name: str, rtt_ms: float, **options) -> tuple[list[str], list[int]]:
    proxy = backend_class(make_loader_backend(loader)).proxy
    with Toxiproxy(stack).network(proxy, rtt_ms=rtt_ms), \
            make_loader(loader, stack, dataset=name, via_proxy=True, **options) as source:
        keys = [item.key for item in source]
        return keys, source.window_history


def make_loader_backend(loader: str) -> str:
    from workbench.loaders import loader_class

    return loader_class(loader).backend


@pytest.mark.parametrize("loader", ["s3-objects", "cassandra", "cassandra-py"])
def test_the_window_at_50ms_is_wider_than_at_0ms(stack, dataset, loader):
    """The native clients: wider at 50 ms than at 0 ms. The Python driver is bound by its own CPU here, so
    at 0 ms its requests queue in the client and its window may open about as wide as the round trip asks
    at 50 ms (once 28 against 25): for it only the widening at 50 ms is asserted."""
    name, ids = dataset
    near, near_history = _epoch(stack, loader, name, rtt_ms=0)
    far, far_history = _epoch(stack, loader, name, rtt_ms=50)
    assert sorted(near) == sorted(far) == ids  # auto changes how many are in flight, never what is read
    assert near_history[0] == far_history[0] == 4  # both start narrow
    assert far_history[-1] >= 16, far_history  # 4 in flight at 50 ms would be 80 samples/s: it must widen
    if loader != "cassandra-py":
        assert far_history[-1] > near_history[-1], (near_history, far_history)


@pytest.mark.parametrize("loader", ["s3-objects", "cassandra"])
def test_a_number_keeps_its_window(stack, dataset, loader):
    keys, history = _epoch(stack, loader, dataset[0], rtt_ms=0, concurrency=7, ordered=False)
    assert sorted(keys) == dataset[1] and history == [7]


def test_bench_loaders_records_the_window_of_every_row(stack, tmp_path):
    # one epoch a round: more epochs of 400 small samples give a 0 ms window, which reads alike at every depth,
    # more time to wander wider (rounds of 2 s: wider than at 50 ms in 2 of 5 runs); rounds of several epochs
    # against the real servers: the s3-shards test below and tests/services/test_extension.py
    rows = bench_loaders(stack, ["s3-objects", "cassandra"], count=400, mean_kb=8, concurrency="auto",
                         rtts_ms=[0.0, 50.0], repeats=1, results_dir=tmp_path, round_seconds=0)
    assert {(r["loader"], r["rtt_ms"]) for r in rows} == {
        (n, rtt) for n in ("s3-objects", "cassandra", "ceiling:s3-objects", "ceiling:cassandra") for rtt in (0.0, 50.0)}
    window = {(r["loader"], r["rtt_ms"]): r["window"] for r in rows}
    assert all(r["concurrency"] == "auto" and r["window"] >= 1 and r["window_history"] for r in rows)
    # each loader's untimed epochs first, recorded: at least its cold one, at most the bench's most
    loaders = [r for r in rows if not r["loader"].startswith("ceiling:")]
    assert all(1 <= r["warmup_epochs"] <= MOST_WARMUP_EPOCHS and r["first_epoch_samples_per_s"] > 0
               and r["warmup_samples_per_s"] > 0 for r in loaders), loaders
    assert all(r["runs_per_round"] == "1" and r["samples"] == 400 for r in rows), rows
    # each loader's epochs in a process of its own, as each ceiling is a program of its own
    assert {(r["loader"].startswith("ceiling:"), r["measured_in"]) for r in rows} == {
        (False, "fresh process"), (True, "own program")}
    for loader in ("s3-objects", "cassandra"):
        assert window[(loader, 50.0)] > window[(loader, 0.0)], rows
        for rtt in (0.0, 50.0):  # a ceiling runs at the window its loaders ended with
            assert window[(f"ceiling:{loader}", rtt)] == window[(loader, rtt)]
    written = next(tmp_path.glob("loaders-*.csv")).read_text().splitlines()[0].split(",")
    assert "window" in written and "window_history" in written


def test_a_shard_reader_records_its_shard_gets_and_its_ceiling_runs_at_them(stack, tmp_path):
    """s3-shards keeps its own window of whole-shard GETs (`parallel_shards`, "auto": from what READ_BUDGET holds):
    its rows record the window it ended with, and its native ceiling runs at those shard GETs, not at the 32 of a
    plain loop."""
    rows = bench_loaders(stack, ["s3-shards"], count=400, mean_kb=8, concurrency="auto", rtts_ms=[0.0], repeats=1,
                         results_dir=tmp_path)
    # a round times whole epochs (passes) for its 2 s, at most MOST_RUNS_PER_ROUND (how many depends on the load)
    assert all(1 <= int(r["runs_per_round"]) <= MOST_RUNS_PER_ROUND for r in rows), rows
    window = {r["loader"]: (r["window"], r["window_history"]) for r in rows}
    loader, history = window["s3-shards"]
    assert int(history.split()[0]) >= AUTO_START and 1 <= loader <= MAX_PARALLEL_SHARDS, rows
    assert window["ceiling:s3-shards"] == (loader, str(loader)), rows


@pytest.fixture(scope="module")
def shard_dataset(stack):
    import uuid

    name = f"auto_shards_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(240, mean_kb=64, seed=6)
    backend = make_backend("s3-shards", stack, name, maxcount=10)  # shards of ~640 KB
    ingest(source, backend, progress=False, check_images=False)
    yield name, sorted(str(s.id) for s in source if s.split == "train")
    backend.drop()


def test_a_shard_reader_adds_the_gets_a_long_round_trip_holds(stack, shard_dataset):
    """s3-shards under "auto": the budget's shard GETs, and on top those waiting out the round trip
    (`RoundTripWindow`). With a budget of 4 of these shards, 50 ms of round trip against GETs of a few ms asks for
    the most it may add (as many again); 0 ms, for fewer."""
    import unittest.mock

    name, ids = shard_dataset
    with make_loader("s3-shards", stack, dataset=name) as source:
        largest = max(info.bytes for info in source.shards())
    with unittest.mock.patch("workbench.concurrency.windows.READ_BUDGET", 4 * largest):
        near, near_history = _epoch(stack, "s3-shards", name, rtt_ms=0, shuffle_buffer=0)
        far, far_history = _epoch(stack, "s3-shards", name, rtt_ms=50, shuffle_buffer=0)
    assert sorted(near) == sorted(far) == ids
    assert near_history[0] == far_history[0] == 4, (near_history, far_history)  # the budget's window first
    assert far_history[-1] == 8, far_history  # GETs of ~640 KB at 50 ms: mostly round trip
    assert near_history[-1] < far_history[-1], (near_history, far_history)
