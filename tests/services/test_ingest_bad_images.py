"""`workbench ingest --on-bad skip|fail` of an image folder with bad files into the real MinIO and the fs baseline.

The folder (tests/unit/test_bad_images.py) holds four good images and three bad files: empty, not an image,
truncated JPEG. Each bad file gets one clean line, `fail` stores nothing and exits 1, `skip` stores the rest.
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest

from workbench.backends.registry import make_backend
from workbench.data import ImageFolderSource
from workbench.ingest import verify

_spec = importlib.util.spec_from_file_location("bad_images", Path(__file__).resolve().parents[1] / "fixtures" /
                                               "bad_images.py")
bad_images = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_images)
BAD, bad_folder, run_cli = bad_images.BAD, bad_images.bad_folder, bad_images.run_cli

pytestmark = pytest.mark.services


@pytest.mark.parametrize("backend", ["fs", "s3-objects", "s3-shards"])
def test_cli_ingest_bad_images(stack, tmp_path, backend):
    root = bad_folder(tmp_path / f"bad-{uuid.uuid4().hex[:8]}")
    source = ImageFolderSource(root)
    target = make_backend(backend, stack, source.name)
    args = ("ingest", "--source", f"imagefolder:{root}", "--backend", backend)
    try:
        fail = run_cli(*args, "--on-bad", "fail")
        assert fail.returncode == 1, fail.stdout + fail.stderr
        lines = fail.stdout.splitlines()
        assert sorted(line for line in lines if line.startswith("bad image ")) == sorted(
            f"bad image {name}: {reason}" for name, reason in BAD.items())
        assert [line for line in lines if line.startswith("error: ")] != []
        assert "Traceback" not in fail.stderr and "object at 0x" not in fail.stdout
        assert target.stored_ids() == set()

        skip = run_cli(*args, "--on-bad", "skip")
        assert skip.returncode == 0, skip.stdout + skip.stderr
        assert sorted(line for line in skip.stdout.splitlines() if line.startswith("skipped bad image ")) == sorted(
            f"skipped bad image {name}: {reason}" for name, reason in BAD.items())
        report = verify(source, target)
        assert report.found == 4 and sorted(report.missing) == sorted(BAD), report
        assert not report.extra and not report.mismatched
    finally:
        target.drop()
