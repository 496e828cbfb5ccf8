"""Bad images at ingest: one clean reason per file, `on_bad` skip or fail, and the CLI's lines and exit codes.

The fs backend keeps everything under tmp_path, so no services are needed here; the same folder goes into
the network backends in tests/services/test_ingest_bad_images.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from workbench.backends.registry import make_backend
from workbench.data import ImageFolderSource, verify_image
from workbench.errors import WorkbenchError
from workbench.ingest import BadImagesError, ingest, verify

_spec = importlib.util.spec_from_file_location("bad_images", Path(__file__).resolve().parents[1] / "fixtures" /
                                               "bad_images.py")
bad_images = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_images)
BAD, bad_folder, run_cli = bad_images.BAD, bad_images.bad_folder, bad_images.run_cli


def _image(fmt: str, seed: int = 0, size: tuple[int, int] = (64, 48)) -> bytes:
    return bad_images.image(fmt, seed, size)

def test_reasons_are_one_clean_line():
    jpeg, png = _image("JPEG", size=(200, 150)), _image("PNG", size=(200, 150))
    assert verify_image(jpeg) is None and verify_image(png) is None
    cases = {
        b"": "empty file (0 bytes)",
        b"hello, world": "not an image",
        jpeg[: len(jpeg) // 2]: "truncated JPEG",
        jpeg[:-2]: "truncated JPEG",
        png[: len(png) // 2]: "truncated PNG",
        png[:-12]: "truncated PNG",
        jpeg[:3]: "truncated or corrupt JPEG header",
    }
    for data, reason in cases.items():
        assert verify_image(data) == reason, (data[:20], verify_image(data))


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n" + bytes(40), b"GIF89a" + bytes(20), b"BM" + bytes(60),
                                  b"\xff\xd8\xff\xe0" + bytes(200), b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(30)])
def test_no_python_repr_in_any_reason(data):
    reason = verify_image(data)
    assert reason and "\n" not in reason
    assert "0x" not in reason and "<" not in reason and "object at" not in reason, reason


@pytest.mark.parametrize("layout", ["imagefolder", "shards"])
def test_skip_stores_the_rest_and_lists_each_bad_file(tmp_path, settings, layout):
    source = ImageFolderSource(bad_folder(tmp_path / "pets"))
    backend = make_backend("fs", settings, source.name, layout=layout)
    summary = ingest(source, backend, on_bad="skip", progress=False)
    assert summary.samples == 4
    assert sorted(summary.skipped_bad) == sorted(f"{name}: {reason}" for name, reason in BAD.items())
    report = verify(source, backend)
    assert sorted(report.missing) == sorted(BAD) and not report.extra and not report.mismatched


def test_fail_writes_nothing_and_names_every_bad_file(tmp_path, settings):
    source = ImageFolderSource(bad_folder(tmp_path / "pets"))
    backend = make_backend("fs", settings, source.name)
    with pytest.raises(BadImagesError) as error:
        ingest(source, backend, on_bad="fail", progress=False, source_spec="imagefolder:pets")
    assert sorted(error.value.bad) == sorted(f"{name}: {reason}" for name, reason in BAD.items())
    message = str(error.value)
    assert "\n" not in message and message.startswith("3 bad image(s) in imagefolder:pets, nothing written")
    assert all(name in message for name in BAD) and "--on-bad skip" in message
    assert backend.stored_ids() == set()


def test_fail_passes_a_clean_folder(tmp_path, settings):
    root = bad_folder(tmp_path / "pets")
    for name in BAD:
        (root / name).unlink()
    source = ImageFolderSource(root)
    summary = ingest(source, make_backend("fs", settings, source.name), on_bad="fail", progress=False)
    assert (summary.samples, summary.skipped_bad) == (4, [])


def test_unknown_on_bad_is_refused(tmp_path, settings):
    source = ImageFolderSource(bad_folder(tmp_path / "pets"))
    with pytest.raises(WorkbenchError, match="unknown on_bad 'ignore': use skip or fail"):
        ingest(source, make_backend("fs", settings, source.name), on_bad="ignore", progress=False)


def test_cli_on_bad_skip_and_fail(tmp_path):
    root = bad_folder(tmp_path / "pets")
    state = tmp_path / "state"
    fail = run_cli("ingest", "--source", f"imagefolder:{root}", "-b", "fs", "--on-bad", "fail", state_dir=state)
    assert fail.returncode == 1, fail.stdout + fail.stderr
    lines = fail.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("bad image ")) == sorted(
        f"bad image {name}: {reason}" for name, reason in BAD.items())
    assert any(line.startswith("error: 3 bad image(s)") for line in lines), lines
    assert "Traceback" not in fail.stderr and "0x" not in fail.stdout
    assert not (state / "fs" / "pets").exists() or not any((state / "fs" / "pets").rglob("*.jpg"))

    skip = run_cli("ingest", "--source", f"imagefolder:{root}", "-b", "fs", state_dir=state)  # skip is the default
    assert skip.returncode == 0, skip.stdout + skip.stderr
    lines = skip.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("skipped bad image ")) == sorted(
        f"skipped bad image {name}: {reason}" for name, reason in BAD.items())
    assert any("fs: 4 samples" in line and "3 bad skipped" in line for line in lines), lines


def test_cli_help_describes_on_bad():
    out = run_cli("ingest", "--help").stdout
    assert "--on-bad" in out and "skip|fail" in out and "--strict" not in out
    assert "grow here" not in run_cli("--help").stdout
