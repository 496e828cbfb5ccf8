"""results/index.html: every study with its question and a headline, the GPU results, the other folders;
relative links only, each to a file that exists."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import study_frames
from typer.testing import CliRunner

from workbench.cli_report import app
from workbench.errors import WorkbenchError
from workbench.report import build_index
from workbench.report.index import descriptions

README = """# Results
| folder | what | machine |
| --- | --- | --- |
| `bench-loaders/` | `workbench bench loaders`: every loader vs its ceiling | 2-core |
| `gpu/` | DALI decoding and training on a GPU | H100 |
"""
LATENCY = "How much of the round-trip time does each loader hide?"
AU = "How many accelerators does each loader keep 90% busy?"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    for name, frame, question in (("latency-hiding", study_frames.latency_study(), LATENCY),
                                  ("accelerators", study_frames.accelerators_study(), AU)):
        folder = study_frames.write(root / "studies" / name, frame, question)
        (folder / "report").mkdir()
        (folder / "report" / "report.html").write_text("<html></html>")  # the index only links it
    (root / "studies" / "accelerators" / "repeatability").mkdir()
    (root / "studies" / "accelerators" / "repeatability" / "repeatability.html").write_text("<html></html>")
    (root / "studies" / "empty").mkdir()
    (root / "gpu" / "train").mkdir(parents=True)
    (root / "gpu" / "README.md").write_text("# GPU paths on an H100\n\ntext\n")
    (root / "gpu" / "train" / "run 1.csv").write_text("a,b\n")  # a space: the link must be encoded
    (root / "bench-loaders").mkdir()
    (root / "bench-loaders" / "loaders-1.json").write_text("{}")
    (root / "runs" / "mine").mkdir(parents=True)  # a user's run: git-ignored, not listed
    (root / "runs" / "mine" / "runs.csv").write_text("x\n")
    (root / "README.md").write_text(README)
    return root


def _hrefs(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'href="([^"]*)"', html)]


def test_every_link_is_relative_and_resolves(results: Path):
    page = build_index(results)
    assert page == results / "index.html"
    hrefs = _hrefs(page.read_text())
    assert len(hrefs) >= 10
    for href in hrefs:
        parts = urlsplit(href)
        assert not parts.scheme and not parts.netloc and not href.startswith("/"), href
        assert (results / unquote(parts.path)).exists(), href
    assert "runs/mine/runs.csv" not in hrefs


def test_each_study_has_its_report_question_and_headline(results: Path):
    html = unescape(build_index(results).read_text())
    studies = html[html.index('id="studies"'):html.index('id="gpu"')]
    assert '<a href="studies/latency-hiding/report/report.html">latency-hiding</a>' in studies
    assert LATENCY in studies and AU in studies
    assert "largest N with AU >= 90% at 0 ms RTT: s3-objects 2, s3-shards 8" in studies
    # the fastest remote loader (fs reads local files): s3-shards, whose window is not the sweep's concurrency
    assert re.search(r"fastest at 100 ms RTT: s3-shards \[conc=\w+\], [\d,]+ samples/s \(0\.\d\d of its 0 ms "
                     r"rate\)", studies)
    assert 'href="studies/accelerators/repeatability/repeatability.html"' in studies
    assert "empty" in studies and "no readable results" in studies


def test_gpu_and_other_folders_are_listed_with_their_description(results: Path):
    html = unescape(build_index(results).read_text())
    gpu = html[html.index('id="gpu"'):html.index('id="other"')]
    assert '<a href="gpu/README.md">gpu</a>' in gpu and "GPU paths on an H100" in gpu
    assert "DALI decoding and training on a GPU" in gpu
    assert 'href="gpu/train/run%201.csv"' in build_index(results).read_text()
    other = html[html.index('id="other"'):]
    assert "bench-loaders" in other and "workbench bench loaders: every loader vs its ceiling" in other
    assert "studies" not in other and ">runs<" not in other


def test_descriptions_come_from_the_results_readme(results: Path):
    assert descriptions(results) == {"bench-loaders": "workbench bench loaders: every loader vs its ceiling",
                                     "gpu": "DALI decoding and training on a GPU"}


def test_a_missing_results_folder_is_one_clear_line(tmp_path: Path):
    with pytest.raises(WorkbenchError, match=r"no results folder .*nowhere: pass the folder that holds studies/"):
        build_index(tmp_path / "nowhere")


def test_cli_index(results: Path):
    result = CliRunner().invoke(app, ["index", "--root", str(results)])
    assert result.exit_code == 0, result.output
    assert (results / "index.html").exists()
