"""The pages work in a real browser: headless Chromium opens report.html pages and results/index.html, every image
decodes (naturalWidth > 0) and every local link resolves. Chromium is Debian's `chromium` package (`make
system-packages` installs it; no browser is downloaded), driven by Playwright."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import study_frames
from browser_check import check_pages, chromium_path

from workbench.report import build_index, build_report, compare_runs, write_comparison

pytestmark = pytest.mark.slow
pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra: pip install -e .[dev])")
if chromium_path() is None:  # `make test` installs it: a missing browser is a missing install step, not a skip
    pytest.fail("chromium is not installed: `make system-packages` installs Debian's chromium (needs root: apt-get "
                "install chromium)", pytrace=False)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def _assert_ok(checks) -> None:
    for check in checks:
        assert check.ok, (check.url, check.broken_images, check.broken_links)


def test_fresh_reports_and_index_in_chromium(tmp_path: Path):
    root = tmp_path / "results"
    study = study_frames.write(root / "studies" / "latency-hiding", study_frames.latency_study(), "How much RTT?")
    again = study_frames.write(tmp_path / "runs" / "latency-hiding", study_frames.latency_study(seed=8), "")
    sweep = root / "old-sweep"
    shutil.copytree(FIXTURES / "sweep-fixture", sweep)
    (root / "gpu").mkdir()
    (root / "gpu" / "README.md").write_text("# GPU results\n")
    pages = [build_report(study), build_report(sweep)]
    pages.append(write_comparison(compare_runs(study, again), study / "repeatability")[1])
    pages.append(build_index(root))
    checks = check_pages(pages)
    _assert_ok(checks)
    assert [c.images for c in checks[:2]] == [5, 6]  # every plot embedded (the study does not vary shards)
    assert [c.links > 5 for c in checks] == [True, True, False, True]  # the repeatability page links its CSV
    assert checks[2].links == 1


def test_committed_index_and_demo_report_in_chromium():
    pages = [REPO / "results" / "index.html", REPO / "results" / "demo" / "report" / "report.html"]
    checks = check_pages(pages)
    _assert_ok(checks)
    assert checks[0].links > 10 and checks[1].images >= 4
