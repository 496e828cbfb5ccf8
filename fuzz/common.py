"""What every harness shares: seeds, the rule (a result or one WorkbenchError line), and the libFuzzer loop.

A harness imports the code it fuzzes inside ``instrumented()``, so atheris sees coverage of that code (and of
tarfile, the one pure-Python parser underneath ours), then calls ``fuzz(name, target, seeds)``. Any exception
other than WorkbenchError, or a WorkbenchError whose message spans lines, is a crash: libFuzzer stops and
writes the input to ``-artifact_prefix`` (`make fuzz` uses fuzz/crashes/).
"""

from __future__ import annotations

import io
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import atheris

from workbench.errors import WorkbenchError

CORPUS = Path(__file__).resolve().parent / "corpus"


def instrumented():
    """Context manager: modules imported inside it are instrumented for coverage."""
    return atheris.instrument_imports(include=["workbench", "tarfile"])


def fuzz(name: str, target: Callable[[bytes], object], seeds: list[bytes]) -> None:
    """Run libFuzzer on `target` with the command line's flags; the corpus lives in fuzz/corpus/<name>/."""
    corpus = CORPUS / name
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i}").write_bytes(seed)

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except WorkbenchError as exc:
            if "\n" in str(exc).strip():
                raise AssertionError(f"WorkbenchError over several lines: {exc!r}") from None

    warnings.simplefilter("ignore")  # Pillow's decompression-bomb and numpy's header warnings are no findings
    atheris.Setup([sys.argv[0], *sys.argv[1:], str(corpus)], one_input)
    atheris.Fuzz()


def tiny_samples(n: int = 3) -> list:
    from workbench.data import Sample, sample_id

    return [Sample(id=sample_id("fuzz", f"c/{i}.jpg"), name=f"c/{i}.jpg", label=i % 3, data=bytes([i]) * (10 + i))
            for i in range(n)]


def encoded_image(fmt: str) -> bytes:
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(buf, fmt)
    return buf.getvalue()


class ScratchFile:
    """One file rewritten for every input, for parsers whose entry point takes a path (in /dev/shm when there)."""

    def __init__(self, name: str) -> None:
        folder = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
        self.path = folder / f"workbench-fuzz-{name}"  # one per harness, reused: libFuzzer exits without cleanup

    def write(self, data: bytes) -> Path:
        self.path.write_bytes(data)
        return self.path
