"""The native ceiling programs against the real servers: exactly the dataset's bytes, and one clear line on failure.

Each backend gets a small two-split dataset of its own (unique names, dropped at the end); a ceiling must
read the 'train' split, every sample of it and nothing of 'val', with the same image bytes as the
backend's own `scan()`, directly and through toxiproxy: the counts, and (`digest=True`) every sample's SHA-256
under its key, against the digests of what `scan()` reads.
"""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import dataclass

import pytest
from shared_sources import TwoSplits

from workbench.backends.registry import make_backend
from workbench.bench.native_ceilings import (
    CeilingConfig,
    digest_mismatches,
    program_name,
    run_native_ceiling,
    sample_digest,
)
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.layouts.objects import object_key
from workbench.stack import ceilings as built

pytestmark = pytest.mark.services

N = 40  # every 4th sample goes to 'val': 30 in 'train'
NETWORKED = ["cassandra", "s3-objects", "s3-shards", "ignite"]
LAYOUTS = {"s3-shards": {"maxcount": 7}, "fs-shards": {"layout": "shards", "maxcount": 7}}


@dataclass(frozen=True)
class Expected:
    """What a ceiling must read of 'train': the counts and key -> SHA-256, both from the backend's scan()."""

    counts: tuple[int, int]
    digests: dict[str, str]


OBJECT_LAYOUTS = {"s3-objects", "fs"}  # one object per sample: a ceiling names a sample by its manifest key


@pytest.fixture(scope="module")
def datasets(settings):
    """variant -> (dataset name, backend name, Expected of 'train' from the backend's scan())."""
    made = {}
    try:
        for variant in [*NETWORKED, "fs", "fs-shards"]:
            name = f"ceil_{variant.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
            backend = make_backend(variant.removesuffix("-shards") if variant == "fs-shards" else variant, settings,
                                   name, workers=4, **LAYOUTS.get(variant, {}))
            made[variant] = backend
            ingest(_source(name), backend, progress=False)
        yield {variant: (b.dataset, b.name, _expected(b, variant)) for variant, b in made.items()}
    finally:
        for backend in made.values():
            backend.drop()


def _source(name: str) -> TwoSplits:
    return TwoSplits(SyntheticSource(N, mean_kb=12, seed=5, name=name))


def _expected(backend, variant: str) -> Expected:
    """Counts and digests of 'train' as the backend's own scan() reads it, keyed as the ceiling names samples: the
    id, or (object layouts) the key under 'train/' that the layout gives the sample of that id."""
    train = [s for s in backend.scan() if s.split == "train"]
    assert len(train) == N - N // 4
    names = {s.id: object_key(s).removeprefix("train/") for s in _source(backend.dataset) if s.split == "train"}
    digests = {names[s.id] if variant in OBJECT_LAYOUTS else str(s.id): sample_digest(s.data) for s in train}
    assert len(digests) == len(train)
    return Expected((len(train), sum(len(s.data) for s in train)), digests)


@pytest.mark.parametrize("variant", [*NETWORKED, "fs", "fs-shards"])
def test_reads_exactly_the_datasets_bytes(settings, datasets, variant):
    dataset, backend, expected = datasets[variant]
    run = run_native_ceiling(settings, backend, {"dataset": dataset, "concurrency": 4}, digest=True)
    assert run.counts == expected.counts
    assert digest_mismatches(run.digests, expected.digests) == []
    assert run.program == program_name(backend)
    assert run.seconds > 0 and run.list_seconds > 0 and run.cpu_s >= 0
    assert run.wire_bytes >= run.bytes  # shards: tar headers, labels and ids on top of the images


def test_a_corrupted_expectation_is_caught(settings, datasets):
    """One flipped byte in one sample, or two samples' bytes swapped between their keys, is a mismatch."""
    dataset, backend, expected = datasets["fs"]
    run = run_native_ceiling(settings, backend, {"dataset": dataset}, digest=True)
    assert digest_mismatches(run.digests, expected.digests) == []
    train = {object_key(s).removeprefix("train/"): s.data for s in _source(dataset) if s.split == "train"}
    first, second = sorted(train)[:2]
    flipped = bytearray(train[first])
    flipped[len(flipped) // 2] ^= 0x01
    corrupted = {**expected.digests, first: sample_digest(bytes(flipped))}
    assert [m.split(":")[0] for m in digest_mismatches(run.digests, corrupted)] == [first]
    swapped = {**expected.digests, first: expected.digests[second], second: expected.digests[first]}
    assert [m.split(":")[0] for m in digest_mismatches(run.digests, swapped)] == [first, second]
    assert run_native_ceiling(settings, backend, {"dataset": dataset}).digests is None  # off by default


@pytest.mark.parametrize("variant", [*NETWORKED, "fs", "fs-shards"])
def test_warm_up_passes_come_before_the_timed_one_and_are_not_counted(settings, datasets, variant):
    dataset, backend, expected = datasets[variant]
    for warmup in (0, 2):
        run = run_native_ceiling(settings, backend, {"dataset": dataset, "concurrency": 4, "warmup": warmup})
        assert run.counts == expected.counts  # one listing, read warmup + 1 times
        if warmup == 0:
            assert run.seconds >= run.list_seconds  # a first pass is timed with its listing, as a first epoch


@pytest.mark.parametrize("variant", NETWORKED)
def test_through_toxiproxy_reads_the_same(settings, datasets, variant):
    dataset, backend, expected = datasets[variant]
    run = run_native_ceiling(settings, backend, CeilingConfig(dataset=dataset, concurrency=3, via_proxy=True),
                             digest=True)
    assert run.counts == expected.counts
    assert digest_mismatches(run.digests, expected.digests) == []


def test_reads_the_split_asked_for(settings, datasets):
    dataset, backend, _ = datasets["s3-objects"]
    assert run_native_ceiling(settings, backend, {"dataset": dataset, "split": "val"}).samples == N // 4


# ----------------------------------------------------------------------------------------- failures


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WRONG_LOGIN = {"cassandra": {"cassandra_password": "wrong-password-x1"},
               "s3-objects": {"s3_secret_key": "wrong-secret-key-x1"},
               "s3-shards": {"s3_secret_key": "wrong-secret-key-x1"},
               "ignite": {"ignite_password": "wrong-password-x1"}}
PORT_FIELD = {"cassandra": "cassandra_port", "s3-objects": "s3_port", "s3-shards": "s3_port",
              "ignite": "ignite_port"}


def _fails_in_one_line(settings, backend: str, dataset: str, secret: str | None = None) -> str:
    start = time.monotonic()
    with pytest.raises(WorkbenchError) as err:
        run_native_ceiling(settings, backend, {"dataset": dataset}, run_timeout_s=60)
    message = str(err.value)
    assert time.monotonic() - start < 45, "a failure must end well before the run limit"
    assert "\n" not in message and backend in message
    if secret:
        assert secret not in message
    return message


@pytest.mark.parametrize("variant", NETWORKED)
def test_a_bad_login_is_one_clear_line(settings, datasets, variant):
    dataset, backend, _ = datasets[variant]
    wrong = {k: type(getattr(settings, k))(v) for k, v in WRONG_LOGIN[variant].items()}
    broken = settings.model_copy(update={**wrong, "timeout_s": 3.0})
    message = _fails_in_one_line(broken, backend, dataset, next(iter(WRONG_LOGIN[variant].values())))
    assert any(word in message.lower() for word in ("auth", "password", "signature", "credential", "access")), message


@pytest.mark.parametrize("variant", NETWORKED)
def test_an_unreachable_port_is_one_clear_line(settings, datasets, variant):
    dataset, backend, _ = datasets[variant]
    port = _closed_port()
    broken = settings.model_copy(update={PORT_FIELD[variant]: port, "timeout_s": 3.0})
    message = _fails_in_one_line(broken, backend, dataset)
    assert str(port) in message


def test_an_unknown_dataset_is_one_clear_line(settings):
    with pytest.raises(WorkbenchError, match="manifest"):
        run_native_ceiling(settings, "s3-objects", {"dataset": f"missing_{uuid.uuid4().hex[:8]}"})


def test_a_missing_toolchain_names_the_tool(settings, tmp_path, monkeypatch):
    fresh = settings.model_copy(update={"cache_dir": tmp_path})  # nothing built there yet
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(WorkbenchError, match="'go' is not on PATH"):
        built.go_program(fresh, "s3-ceiling")


@pytest.mark.slow
def test_stack_provisioning_builds_the_go_ceilings(settings, tmp_path):
    fresh = settings.model_copy(update={"cache_dir": tmp_path})
    built.provision_ceilings(fresh, ["minio"])
    home = built.go_home(fresh)
    assert (home / ".complete").exists()
    assert sorted(p.name for p in (home / "bin").iterdir()) == sorted(built.GO_PROGRAMS.values())
