"""The report of study-era results (tests/fixtures/study_frames.py): Little's law, ceilings measured in the same
run, start-up vs steady state, measured accelerator utilisation; and how older results are still reported."""

from __future__ import annotations

import json
import re
import shutil
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
import study_frames

from workbench.report import build_report, little, load, make_report, summarise
from workbench.report.plots import largest_n, startup_flags

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LATENCY_QUESTION = "How much of the round-trip time does each loader hide, and how close to Little's law?"


@pytest.fixture(scope="module")
def latency(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = study_frames.write(tmp_path_factory.mktemp("latency") / "latency-hiding", study_frames.latency_study(),
                                LATENCY_QUESTION)
    page, plots = make_report(folder)
    return page, {p.name: p for p in plots}


@pytest.fixture(scope="module")
def accelerators(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = study_frames.write(tmp_path_factory.mktemp("au") / "accelerators", study_frames.accelerators_study(),
                                "How many accelerators does each loader keep 90% busy?")
    page, plots = make_report(folder)
    return page, {p.name: p for p in plots}


def _table(page: str, title: str) -> list[list[str]]:
    """The rows (cell texts) of the table that follows the heading `title`."""
    html = page[page.index(title):]
    html = html[:html.index("</table>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", html)[1:]]


# --- Little's law -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("row", "in_flight", "per_request"), [
    ({"loader": "s3-objects", "concurrency": "32"}, 32, 1),
    ({"loader": "cassandra", "concurrency": 8, "workers": 2}, 16, 1),  # each DataLoader worker has its own window
    ({"loader": "s3-naive", "concurrency": 32}, 1, 1),  # one GET at a time, whatever the sweep's concurrency
    ({"loader": "ignite", "concurrency": 4}, 4, 64),  # get_all of get_batch (its default) keys
    ({"loader": "s3-shards", "concurrency": 128, "parallel_shards": 4, "shard_maxcount": 50, "shard_maxsize": 1e8,
      "data_mean_kb": 110}, 4, 50),  # parallel_shards whole shards, not `concurrency`
    ({"loader": "s3-shards", "concurrency": 8, "parallel_shards": 4, "shard_maxcount": 2000, "shard_maxsize": 1e8,
      "data_mean_kb": 110}, 4, 1e8 // (110 * 1024 + little.SHARD_ENTRY_OVERHEAD)),  # maxsize closes it before maxcount
    ({"loader": "webdataset", "shard_maxcount": 20, "data_count": 10}, 1, 10),  # a dataset smaller than a shard
])
def test_littles_law_bound_per_loader(row, in_flight, per_request):
    bound = little.bound(row)
    assert (bound.in_flight, bound.per_request) == (in_flight, per_request)
    assert bound.at(50.0) == pytest.approx(in_flight * per_request / 0.05)


@pytest.mark.parametrize("row", [{"loader": "s3-objects", "concurrency": "auto"}, {"loader": "fs", "concurrency": 8},
                                 {"loader": "s3-shards", "concurrency": 8, "shard_maxcount": 50},  # its own auto
                                 {"loader": "mosaic-streaming"}, {"loader": "no-such-loader", "concurrency": 8}])
def test_no_bound_where_the_window_is_not_ours_or_not_set(row):
    assert little.bound(row) is None


def test_latency_plot_draws_a_bound_per_concurrency_and_says_what_a_request_is(latency):
    page, plots = latency
    note = plots["throughput_vs_rtt"].note
    for concurrency in (8, 32, 128):
        assert f"{concurrency} in flight x 1 sample(s) per request (s3-objects [conc={concurrency}]): " \
               f"{concurrency} samples / RTT" in note
    assert "(s3-shards [conc" not in note  # its parallel_shards is "auto": a measured window, no bound to draw
    assert "s3-shards: one GET of a whole shard (the sweep's concurrency does not apply), `parallel_shards` in " \
           "flight" in note
    assert "fs: no bound (reads local files" in note
    assert "stars: concurrency 'auto'" in unescape(page.read_text())


# --- ceilings measured in the same run ----------------------------------------------------------------------

def test_ceilings_come_from_the_run_itself(latency):
    page, plots = latency
    ctx = load(page.parent.parent)
    assert ctx.ceilings.in_run and ctx.ceilings.backends == ["cassandra", "s3-objects", "s3-shards"]
    runs = ctx.runs[(ctx.runs.loader == "ceiling:cassandra") & (ctx.runs.rtt_ms == 50)]
    assert ctx.ceilings.of("cassandra", 50.0, "8") == pytest.approx(runs.samples_per_s.median())
    assert "Native ceilings measured in this run; none for fs." in plots["throughput_vs_rtt"].note
    assert "Ceilings measured in this run, at the same network points; none for fs." in plots["loaders_by_backend"].note
    text = page.read_text()
    rows = _table(text, "Native ceilings measured in this run (median")
    assert len(rows) == 3 * 4 and {r[0] for r in rows} == {"cassandra", "s3-objects", "s3-shards"}
    assert rows[0][1] == "go/test-program"
    assert len(ctx.summary) == 64  # ceilings are not points of the loaders' table


def test_ceilings_of_another_run_are_labelled_as_such(tmp_path: Path):
    folder = tmp_path / "results" / "old-sweep"
    shutil.copytree(FIXTURES / "sweep-fixture", folder)
    (tmp_path / "results" / "bench-loaders").mkdir()
    rows = [{"loader": "ceiling:cassandra", "backend": "cassandra", "rtt_ms": 0.0, "samples_per_s": 900.0}]
    (tmp_path / "results" / "bench-loaders" / "loaders-1.json").write_text(json.dumps({"rows": rows}))
    page = build_report(folder).read_text()
    assert "This sweep has no ceiling rows: the dashed lines are ceilings of ANOTHER run" in page
    assert "This sweep measured no native ceilings (no ceiling:&lt;backend&gt; rows) (ceilings of another run" in page


def test_no_ceilings_anywhere_is_said_plainly(tmp_path: Path):
    folder = study_frames.write(tmp_path / "plain", study_frames.accelerators_study(), "")
    page = build_report(folder).read_text()
    assert "This sweep has no ceiling rows and no other ceiling result was found" in page


# --- start-up vs steady state ----------------------------------------------------------------------------

def test_startup_share_and_steady_rate_are_columns_and_slow_starts_are_flagged(latency):
    page, plots = latency
    ctx = load(page.parent.parent)
    slow = ctx.summary[ctx.summary.startup_fraction_median >= 0.05]
    assert 0 < len(slow) < len(ctx.summary)
    text = page.read_text()
    points = text[text.index('id="points"'):]
    assert "steady samples/s" in points and "start-up share" in points
    assert points.count("⚠</td>") == len(slow)
    flagged = startup_flags(ctx)
    assert len(flagged) == len(slow) and flagged["note"].str.startswith("start-up ").all()
    assert f"{len(slow)} of 64 point(s) spent >= 5% of their measured time starting up" in plots["startup"].note
    assert plots["startup"].path.exists()


def test_older_results_get_an_estimated_startup_share_and_say_so(tmp_path: Path):
    folder = tmp_path / "old"
    shutil.copytree(FIXTURES / "sweep-fixture", folder)
    ctx = load(folder)
    runs = pd.read_parquet(folder / "runs.parquet")
    ok = runs[runs.status == "ok"].iloc[0]
    row = ctx.runs[(ctx.runs.point_id == ok.point_id) & (ctx.runs.repetition == ok.repetition)].iloc[0]
    assert row.startup_fraction == pytest.approx(ok.time_to_first_batch_s / ok.seconds)
    page = build_report(folder).read_text()
    assert "These results predate the start-up columns" in page
    assert "These results record no steady-state rate" in page


# --- accelerator utilisation ------------------------------------------------------------------------------

def test_measured_au_against_n_and_the_largest_n_at_90_percent(accelerators):
    page, plots = accelerators
    plot = plots["accelerator_utilisation"]
    assert "(measured)" in plot.title and "estimate" not in plot.title.lower()
    title, table = plot.tables[0]
    assert title == "Largest N with AU >= 90% per loader (measured)"
    largest = {(r["loader"], r["rtt_ms"]): r["largest N with AU >= 90%"] for r in table.to_dict("records")}
    # supply (batches/s) x 0.05 s of compute per batch = accelerators kept busy: 2.5, 1.67, 7.5 and 5
    assert largest == {("s3-objects", 0.0): 2, ("s3-objects", 50.0): 1, ("s3-shards", 0.0): 8,
                       ("s3-shards", 50.0): 4}
    assert "Largest N with AU &gt;= 90% per loader (measured)" in page.read_text()


def test_largest_n_is_zero_when_no_n_reaches_the_target():
    rows = pd.DataFrame({"accelerators": [1, 2], "au_min_median": [0.85, 0.5]})
    assert largest_n(rows) == 0
    assert largest_n(rows.assign(au_min_median=[0.9, 0.95])) == 2


def test_without_measured_n_the_formula_is_labelled_an_estimate(tmp_path: Path):
    folder = tmp_path / "old"
    shutil.copytree(FIXTURES / "sweep-fixture", folder)
    _page, plots = make_report(folder)
    plot = {p.name: p for p in plots}["accelerator_utilisation"]
    assert plot.title.endswith("(estimate, not measured)")
    assert plot.tables[0][0] == "Estimated emulated accelerators kept at >= 90% AU (formula, not measured)"


def test_other_plots_hold_n_at_its_smallest(accelerators):
    _page, plots = accelerators
    assert "Points shown: emulated accelerators 1." in plots["throughput_vs_rtt"].note


# --- topology, question ------------------------------------------------------------------------------------

def test_a_varied_topology_column_is_a_grid_column():
    frame = study_frames.accelerators_study()
    frame["topology_client_ranks"] = frame["repetition"].map({0: 1, 1: 2, 2: 2})
    summary = summarise(frame)
    assert "topology_client_ranks" in summary.columns
    assert len(summary) == 2 * len(summarise(study_frames.accelerators_study()))
    assert "topology_s3_nodes" not in summary.columns  # the same everywhere: not a grid column


def test_the_question_heads_the_page(latency):
    page, _ = latency
    assert f"Question: {LATENCY_QUESTION}" in unescape(page.read_text())


def test_every_registered_loader_says_what_a_request_is_and_a_new_one_brings_its_own():
    from workbench.loaders.base import Loader, RequestModel
    from workbench.loaders.registry import LOADERS, loader_class, register_loader

    for name in LOADERS:
        assert isinstance(loader_class(name).request_model, RequestModel), name

    class Batched(Loader):  # a loader no report module knows: its class is the only place that says it
        name, backend = "batched-test", "fs"
        request_model = RequestModel("one batch of `get_batch` keys", per_request="batch_keys", window="concurrency")

    register_loader("batched-test", Batched)
    try:
        assert "batched-test: one batch of `get_batch` keys, `concurrency` in flight" in little.describe(
            ["batched-test"])
        Batched.request_model = RequestModel("reads local files", per_request=None)
        assert little.describe(["batched-test"]) == "batched-test: no bound (reads local files)"
        assert little.bound({"loader": "batched-test", "concurrency": 8}) is None
    finally:
        LOADERS.pop("batched-test")
