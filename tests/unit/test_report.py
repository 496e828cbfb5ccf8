"""The sweep report renders from a stored results fixture (tests/fixtures/sweep-fixture, see its generator)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from workbench.report import build_report, summarise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLOTS = {"throughput_vs_rtt", "throughput_vs_shard_size", "batch_latency_cdf", "startup", "accelerator_utilisation",
         "loaders_by_backend"}
LOADERS = ("cassandra", "s3-shards", "s3-objects")


def _generator():
    spec = importlib.util.spec_from_file_location("make_results_fixture", FIXTURES / "make_results_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A copy of the stored fixture under results/<name>/ (report files are written beside it)."""
    folder = tmp_path / "results" / "fixture-sweep"
    shutil.copytree(FIXTURES / "sweep-fixture", folder)
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture's report, built once for the read-only checks."""
    folder = tmp_path_factory.mktemp("built") / "results" / "fixture-sweep"
    shutil.copytree(FIXTURES / "sweep-fixture", folder)
    return build_report(folder)


def test_fixture_is_what_the_generator_writes(tmp_path: Path):
    stored = FIXTURES / "sweep-fixture"
    fresh = _generator().write(tmp_path / "fresh")
    pd.testing.assert_frame_equal(pd.read_parquet(fresh / "runs.parquet"), pd.read_parquet(stored / "runs.parquet"))
    for name in ("config.json", "environment.json"):
        assert json.loads((fresh / name).read_text()) == json.loads((stored / name).read_text())


def test_report_html_mentions_every_loader_and_embeds_every_plot(built: Path):
    report = built
    assert report.name == "report.html" and report.parent.name == "report"
    assert (report.parent.parent / "summary.csv").exists()
    page = report.read_text()
    for loader in LOADERS:
        assert loader in page
    pngs = {p.stem for p in report.parent.glob("*.png")}
    assert pngs == PLOTS
    for name in PLOTS:
        assert f'href="{name}.png"' in page
    assert page.count("data:image/png;base64,") == len(PLOTS)
    # the caption carries the configuration and the machine
    for text in ("fixture-sweep", "1000 samples x 110 KB", "concurrency 32", "batch 32", "3 repetition(s)",
                 "Intel(R) Xeon(R) CPU @ 2.20GHz", "1e93751"):
        assert text in page


def test_report_lists_the_failed_run(built: Path):
    page = built.read_text()
    failed = page[page.index('id="failed"'):]
    assert "1 run(s) failed" in failed
    assert "ReadTimeoutError: Read timeout on endpoint URL" in failed
    row = re.search(r"<tr>(.*?ReadTimeoutError.*?)</tr>", failed).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[:3] == ["22", "2", "s3-objects"]  # point_id, repetition, loader


def test_every_png_opens_and_is_not_blank(built: Path):
    for path in built.parent.glob("*.png"):
        assert path.stat().st_size > 10_000, path.name
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            width, height = image.size
            assert width >= 500 and height >= 300, (path.name, image.size)
            low, high = image.convert("L").getextrema()
            assert high - low > 100, path.name
            colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is None or len(colours) > 50, path.name


def test_summary_csv_medians_by_hand(built: Path):
    summary = pd.read_csv(built.parent.parent / "summary.csv")
    assert len(summary) == 24  # 6 cassandra + 12 s3-shards (two shard sizes) + 6 s3-objects points
    cassandra = summary[(summary.loader == "cassandra") & (summary.rtt_ms == 50) & (summary.compute_ms == 0)]
    assert len(cassandra) == 1
    row = cassandra.iloc[0]
    # runs: 449.6, 478.9, 467.1 samples/s
    assert row.samples_per_s_median == pytest.approx(467.1)
    assert row.samples_per_s_min == pytest.approx(449.6)
    assert row.samples_per_s_max == pytest.approx(478.9)
    # p95 per run: 103.82695, 101.80310, 89.06870
    assert row.batch_p95_ms_median == pytest.approx(101.8031)
    assert (row.runs_ok, row.runs_failed) == (3, 0)
    # the failed repetition is left out: the median of the two successful runs (323.4, 306.6)
    objects = summary[(summary.loader == "s3-objects") & (summary.rtt_ms == 50) & (summary.compute_ms == 0)].iloc[0]
    assert (objects.runs_ok, objects.runs_failed) == (2, 1)
    assert objects.samples_per_s_median == pytest.approx(315.0)


def test_summarise_groups_by_every_grid_column(sweep: Path):
    runs = pd.read_parquet(sweep / "runs.parquet")
    summary = summarise(runs)
    shards = summary[summary.loader == "s3-shards"]
    assert sorted(shards.shard_maxcount.unique()) == [50, 200]
    assert summary[summary.loader == "cassandra"].shard_maxcount.isna().all()
    assert summary.runs_ok.sum() + summary.runs_failed.sum() == len(runs)
    assert list(summary.point_id) == sorted(summary.point_id)


def test_ratio_to_ceiling_from_a_sibling_bench_loaders_result(sweep: Path):
    bench = sweep.parent / "bench-loaders"
    bench.mkdir()
    rows = [{"loader": f"ceiling:{b}", "backend": b, "rtt_ms": rtt, "concurrency": 32, "samples_per_s": 4000.0,
             "dataset": "bench_loaders_1000_110kb"} for b in LOADERS for rtt in (0.0, 10.0, 50.0)]
    rows.append({"loader": "cassandra", "backend": "cassandra", "rtt_ms": 0.0, "samples_per_s": 1.0})
    (bench / "loaders-20260301-120000.json").write_text(json.dumps({"written": "now", "rows": rows}))
    page = build_report(sweep).read_text()
    assert "loaders-20260301-120000.json" in page
    table = page[page.index("against its peers and its backend"):]
    table = table[:table.index("</table>")]
    row = re.search(r"<tr><td[^>]*>cassandra</td><td[^>]*>cassandra</td><td>50</td>(.*?)</tr>", table).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    # samples/s 467.1; ceiling 4000 -> 0.12
    assert cells[0] == "467.10" and cells[-2] == "4,000" and cells[-1] == "0.12"


def test_a_sweep_that_did_not_vary_the_layout_says_so(sweep: Path):
    runs = pd.read_parquet(sweep / "runs.parquet")
    runs = runs[runs.shard_maxcount.isna() | (runs.shard_maxcount == 50)]
    runs.to_parquet(sweep / "runs.parquet", index=False)
    page = build_report(sweep).read_text()
    assert "did not vary the shard layout" in page
    assert not (sweep / "report" / "throughput_vs_shard_size.png").exists()


def test_symlog_axis_when_rtts_span_decades(sweep: Path):
    runs = pd.read_parquet(sweep / "runs.parquet")
    runs["rtt_ms"] = runs["rtt_ms"].map({0.0: 0.0, 10.0: 1.0, 50.0: 100.0})
    runs.to_parquet(sweep / "runs.parquet", index=False)
    assert "symlog" in build_report(sweep).read_text()


def test_a_sweep_where_everything_failed_still_reports(tmp_path: Path):
    folder = tmp_path / "broken"
    folder.mkdir()
    pd.DataFrame([{"sweep": "broken", "point_id": 0, "repetition": r, "backend": "ignite", "loader": "ignite",
                   "rtt_ms": 0.0, "compute_ms": 0.0, "status": "error",
                   "error": "WorkbenchError: cannot reach Ignite <at> 127.0.0.1:20800"} for r in range(2)]
                 ).to_parquet(folder / "runs.parquet", index=False)
    page = build_report(folder).read_text()
    assert "2 run(s) failed" in page
    assert "cannot reach Ignite &lt;at&gt; 127.0.0.1:20800" in page
    assert not list((folder / "report").glob("*.png"))


def test_a_stopped_sweep_is_reported_incomplete(sweep):
    (sweep / "progress.json").write_text(json.dumps({"runs_done": 3, "runs_total": 40, "complete": False}))
    html = build_report(sweep).read_text()
    assert "INCOMPLETE: the sweep stopped after 3 of 40 runs" in html
    (sweep / "progress.json").write_text(json.dumps({"runs_done": 40, "runs_total": 40, "complete": True}))
    assert "INCOMPLETE" not in build_report(sweep).read_text()
