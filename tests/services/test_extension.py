"""Adding a backend and its loader is one module each plus one registration line each.

The "jar" backend below (one ``<id>.bin`` + ``<id>.json`` pair per sample in a folder per split, a second
local layout) and its loader exist only in this test module. After `register_backend` and
`register_loader`, ingest, `bench loaders`, a one-point sweep and the report all work on it: nothing else
in the code base knows its name, because every tool asks the registry and the descriptors.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from workbench.backends import BACKENDS, Backend, StoredSample, make_backend, register_backend
from workbench.bench.loaders import bench_loaders
from workbench.bench.sweep import run_sweep
from workbench.bench.sweep_config import load_sweep_config
from workbench.concurrency import fixed_depth
from workbench.config import Settings
from workbench.data import Progress, Sample, SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import LOADERS, Item, Loader, LoaderConfig, make_loader, register_loader
from workbench.report import build_report

pytestmark = pytest.mark.services

NAME = "jar"


class JarBackend(Backend):
    """Each sample as ``<root>/<split>/<id>.bin`` and its label and split in ``<id>.json``; local, unsharded."""

    name = NAME

    @property
    def root(self) -> Path:
        return self.settings.state_dir / "jar" / self.dataset

    def prepare(self, splits: Iterable[str]) -> None:
        for split in splits:
            (self.root / split).mkdir(parents=True, exist_ok=True)

    def stored_ids(self) -> set[uuid.UUID]:
        return {uuid.UUID(p.stem) for p in self.root.glob("*/*.json")}

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        for s in samples:
            folder = self.root / s.split
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{s.id}.bin").write_bytes(s.data)
            (folder / f"{s.id}.json").write_text(json.dumps({"label": s.label}))  # written last: complete
            progress(1, len(s.data))

    def scan(self) -> Iterator[StoredSample]:
        for meta in sorted(self.root.glob("*/*.json")):
            label = json.loads(meta.read_text())["label"]
            yield StoredSample(uuid.UUID(meta.stem), meta.parent.name, label, meta.with_suffix(".bin").read_bytes())

    def drop_layout(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def describe(self) -> dict:
        return {**super().describe(), "root": str(self.root)}


class JarLoader(Loader):
    """Reads a split's pairs with `concurrency` threads; this rank's share of the ids, in order."""

    name = NAME
    backend = NAME

    def _ids(self) -> list[Path]:
        root = JarBackend(self.settings, self.config.dataset).root / self.config.split
        ids = sorted(root.glob("*.json"))
        if not ids:
            raise WorkbenchError(f"no samples under {root}: ingest first")
        return ids[self.config.shard_id::self.config.num_shards]

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        def read(meta: Path) -> Item:
            return Item(meta.stem, json.loads(meta.read_text())["label"], meta.with_suffix(".bin").read_bytes())

        with ThreadPoolExecutor(fixed_depth(self.config.concurrency)) as pool:  # "auto": a fixed loop's depth
            yield from pool.map(read, self._ids())

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        files = [m.with_suffix(".bin") for m in cls(settings, config)._ids()]
        return len(files), sum(len(f.read_bytes()) for f in files)


@pytest.fixture
def registered():
    register_backend(NAME, JarBackend)  # the one line a new backend needs
    register_loader(NAME, JarLoader)  # the one line a new loader needs
    yield
    BACKENDS.pop(NAME)
    LOADERS.pop(NAME)


def test_a_backend_and_loader_defined_here_run_through_ingest_bench_sweep_and_report(stack, registered, tmp_path,
                                                                                    unique):
    source = SyntheticSource(40, name=unique, seed=3, mean_kb=4)
    backend = make_backend(NAME, stack, unique)
    try:
        summary = ingest(source, backend, check_images=False, progress=False)
        assert summary.samples == 40
        with make_loader(NAME, stack, dataset=unique, split="train") as loader:
            assert sorted(i.key for i in loader) == sorted(str(s.id) for s in source if s.split == "train")

        rows = bench_loaders(stack, [NAME], count=30, mean_kb=4, concurrency=4, rtts_ms=[0.0], repeats=1,
                             results_dir=tmp_path / "bench", items=True)
        assert {r["loader"] for r in rows} == {NAME, f"{NAME}[items]", f"ceiling:{NAME}"}
        assert all(r["samples_per_s"] > 0 for r in rows)
        # registered here at run time: a fresh process would not know it, so it is measured in this one
        assert {r["measured_in"] for r in rows} == {"bench process"}
        assert len({r["samples"] for r in rows if not r["loader"].startswith("ceiling:")}) == 1  # both paths: all

        cfg = load_sweep_config({
            "name": "jar-sweep", "loaders": [NAME], "data": {"count": 32, "mean_kb": 4, "seed": 1},
            "network": {"rtt_ms": [0]}, "loader": {"batch_size": [8]}, "epochs": 1, "repetitions": 1,
            "warmup_batches": 0,
        })
        folder = run_sweep(stack, cfg, tmp_path / "sweeps", progress=False)
        runs = pd.read_parquet(folder / "runs.parquet")
        assert list(runs.status) == ["ok"] and runs.samples.iloc[0] == 32
        report = build_report(folder)
        assert NAME in report.read_text()
    finally:
        backend.drop()
        make_backend(NAME, stack, "bench_loaders_30_4kb").drop()
