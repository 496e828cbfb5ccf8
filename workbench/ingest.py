"""Ingest a source into a backend: skip what is already stored, stream the rest, report, verify.

Ids are uuid5(dataset, sample name), so ingesting the same source twice adds nothing and an
interrupted ingest resumes where it stopped: `stored_ids` says what is already complete.

Bad images (empty, not an image, truncated, corrupt: `verify_image`'s one-line reasons) follow ``on_bad``:
``skip`` stores the rest and lists each bad file in the summary; ``fail`` checks every image first and,
if any is bad, writes nothing and raises `BadImagesError` naming them all.
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
from workbench.data import Sample, Source, checksum, verify_image
from workbench.errors import WorkbenchError

ON_BAD = ("skip", "fail")


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


class BadImagesError(WorkbenchError):
    """`ingest(on_bad="fail")` found bad images; ``bad`` holds one ``name: reason`` line per file."""

    def __init__(self, source: str, bad: list[str]) -> None:
        self.bad = bad
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        super().__init__(f"{len(bad)} bad image(s) in {source}, nothing written: {shown}; "
                         "fix or remove them, or use --on-bad skip to ingest the rest")


def bad_images(source: Source, skip: set) -> list[str]:
    """``name: reason`` of every sample of `source` (except ids in `skip`) that is not a readable image."""
    return [f"{s.name}: {problem}" for s in source if s.id not in skip and (problem := verify_image(s.data))]


def _checked(source: Source, backend: Backend, summary: IngestSummary, skip: set,
             check_images: bool) -> Iterator[Sample]:
    """The source's samples that still need writing; bad images are left out and listed in the summary."""
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
            summary.skipped_bad.append(f"{sample.name}: {problem}")
            continue
        yield sample


def ingest(source: Source, backend: Backend, on_bad: str = "skip", check_images: bool = True,
           progress: bool = True, source_spec: str = "") -> IngestSummary:
    """Write every sample of `source` that `backend` does not hold yet; returns the summary.

    Bad images: see the module docstring (``on_bad``); ``check_images=False`` trusts the source (synthetic data).
    """
    if on_bad not in ON_BAD:
        raise WorkbenchError(f"unknown on_bad '{on_bad}': use {' or '.join(ON_BAD)}")
    total = len(source)
    if total == 0:
        raise WorkbenchError(f"source {source.name} is empty: nothing to ingest")
    summary = IngestSummary(backend.name, source.name)
    backend.prepare(source_splits(source))
    stored = backend.stored_ids()
    if check_images and on_bad == "fail":
        bad = bad_images(source, stored)
        if bad:
            raise BadImagesError(source_spec or source.name, bad)
        check_images = False  # every image was just checked
    bar = tqdm(total=total, unit="img", desc=f"ingest {backend.name}", disable=not progress,
               initial=0, dynamic_ncols=True)

    def advance(samples: int, nbytes: int) -> None:
        summary.samples += samples
        summary.bytes += nbytes
        bar.update(samples)

    start = time.perf_counter()
    try:
        backend.write(_checked(source, backend, summary, stored, check_images), advance)
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
