"""Ingest a source into a backend: skip what is already stored, stream the rest, report, verify.

Ids are uuid5(dataset, sample name), so ingesting the same source twice adds nothing and an
interrupted ingest resumes where it stopped: `stored_ids` says what is already complete.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from workbench import catalog
from workbench.backends.base import Backend
from workbench.data import Sample, Source, verify_image
from workbench.errors import WorkbenchError


@dataclass
class IngestSummary:
    backend: str
    dataset: str
    samples: int = 0
    bytes: int = 0
    seconds: float = 0.0
    already_stored: int = 0
    skipped_bad: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (f"{self.backend}: {self.samples} samples, {self.bytes / 1e6:.1f} MB in {self.seconds:.1f} s "
                f"= {self.mb_per_s:.1f} MB/s ({self.already_stored} already stored, "
                f"{len(self.skipped_bad)} bad skipped)")


@dataclass
class VerifyReport:
    backend: str
    dataset: str
    expected: int
    found: int
    missing: list[str]
    extra: list[str]
    mismatched: list[str]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.mismatched)


def _checked(source: Source, backend: Backend, summary: IngestSummary, skip: set, strict: bool,
             check_images: bool) -> Iterator[Sample]:
    """The source's samples that still need writing; bad ones are refused or counted by name."""
    limit = backend.options.max_sample_bytes
    for sample in source:
        if sample.id in skip:
            summary.already_stored += 1
            continue
        if len(sample.data) > limit:
            raise WorkbenchError(
                f"sample {sample.name} is {len(sample.data)} bytes, over the {backend.name} limit of {limit}: "
                "raise --max-sample-bytes (and the server's limits) or leave it out of the source"
            )
        problem = verify_image(sample.data) if check_images else None
        if problem:
            if strict:
                raise WorkbenchError(f"bad image {sample.name}: {problem} (drop --strict to skip bad images)")
            summary.skipped_bad.append(f"{sample.name}: {problem}")
            continue
        yield sample


def ingest(source: Source, backend: Backend, strict: bool = False, check_images: bool = True,
           progress: bool = True, source_spec: str = "") -> IngestSummary:
    """Write every sample of `source` that `backend` does not hold yet; returns the summary."""
    total = len(source)
    if total == 0:
        raise WorkbenchError(f"source {source.name} is empty: nothing to ingest")
    summary = IngestSummary(backend.name, source.name)
    backend.prepare(source_splits(source))
    stored = backend.stored_ids()
    bar = tqdm(total=total, unit="img", desc=f"ingest {backend.name}", disable=not progress,
               initial=0, dynamic_ncols=True)

    def advance(samples: int, nbytes: int) -> None:
        summary.samples += samples
        summary.bytes += nbytes
        bar.update(samples)

    start = time.perf_counter()
    try:
        backend.write(_checked(source, backend, summary, stored, strict, check_images), advance)
    finally:
        summary.seconds = time.perf_counter() - start
        bar.update(summary.already_stored + len(summary.skipped_bad))
        bar.close()
    write_catalog(backend, summary, source_spec or source.name)
    return summary


def source_splits(source: Source) -> list[str]:
    """The original splits a source yields, known without reading it (default: one 'train' split)."""
    return list(getattr(source, "splits", None) or [getattr(source, "split", "train")])


def verify(source: Source, backend: Backend) -> VerifyReport:
    """Re-read everything the backend holds and compare ids and content checksums with the source."""
    from workbench.data import checksum

    expected = {s.id: (s.name, s.checksum) for s in source}
    found: Counter = Counter()
    mismatched, extra = [], []
    for stored in backend.scan():
        found[stored.id] += 1
        if stored.id not in expected:
            extra.append(str(stored.id))
        elif checksum(stored.data) != expected[stored.id][1]:
            mismatched.append(expected[stored.id][0])
    duplicated = [expected[i][0] for i, n in found.items() if n > 1 and i in expected]
    missing = [name for i, (name, _) in expected.items() if i not in found]
    return VerifyReport(backend.name, source.name, len(expected), sum(found.values()), missing, extra,
                        mismatched + [f"{d} (stored more than once)" for d in duplicated])


def write_catalog(backend: Backend, summary: IngestSummary, source_spec: str = "") -> Path:
    """Record where the dataset lives and what it came from (loaders and `verify` read it)."""
    entry = {**backend.describe(), "source": source_spec, "last_ingest": asdict(summary)}
    return catalog.record(backend.settings, backend.name, backend.dataset, entry)


def read_catalog(settings, backend: str, dataset: str) -> dict:
    path = catalog.catalog_path(settings, backend, dataset)
    if not path.exists():
        known = ", ".join(catalog.known(settings, backend)) or "none"
        raise WorkbenchError(f"dataset '{dataset}' was never ingested into {backend} here (known: {known}): "
                             "run `workbench ingest`")
    return json.loads(path.read_text())
