"""Repeatability: two runs of one study compared point by point (medians, ratio, a flag past 10%)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import study_frames
from typer.testing import CliRunner

from workbench.cli_report import app
from workbench.errors import WorkbenchError
from workbench.report import compare_runs, write_comparison

QUESTION = "How many accelerators does each loader keep 90% busy?"


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """The same study twice: run B is run A with s3-objects at 50 ms RTT 20% faster and one point missing."""
    frame = study_frames.accelerators_study()
    first = study_frames.write(tmp_path / "a" / "accelerators", frame, QUESTION)
    second = frame.copy()
    faster = (second.loader == "s3-objects") & (second.rtt_ms == 50.0)
    second.loc[faster, "samples_per_s"] *= 1.2
    second = second[~((second.loader == "s3-shards") & (second.rtt_ms == 0.0) & (second.accelerators == 8))]
    return first, study_frames.write(tmp_path / "b" / "accelerators", second, QUESTION)


def test_each_point_has_both_medians_their_ratio_and_a_flag_past_10_percent(two_runs):
    comparison = compare_runs(*two_runs)
    table = comparison.table
    assert len(table) == 16  # 2 loaders x 2 RTTs x 4 N
    flagged = comparison.flagged
    assert set(flagged.loader) == {"s3-objects"} and set(flagged.rtt_ms) == {"50"} and len(flagged) == 4
    assert flagged.ratio.to_numpy() == pytest.approx([1.2] * 4)
    assert flagged.difference.to_numpy() == pytest.approx([0.2] * 4)
    same = table[(table.loader == "s3-objects") & (table.rtt_ms == "0")]
    assert (same.median_a == same.median_b).all() and (same.ratio == 1).all() and not same.differs.any()
    missing = table[table.median_b.isna()]
    assert len(missing) == 1 and missing.iloc[0].accelerators == "8" and not missing.iloc[0].differs
    assert comparison.summary().startswith("11 of 15 points agree within 10% (samples_per_s medians); median "
                                           "difference 0.0%, largest 20.0% (loader s3-objects")
    assert "1 point(s) were not measured successfully in both runs." in comparison.summary()


def test_the_tolerance_is_a_parameter(two_runs):
    assert compare_runs(*two_runs, tolerance=0.25).flagged.empty


def test_csv_and_html_are_written(two_runs, tmp_path: Path):
    csv, page = write_comparison(compare_runs(*two_runs), tmp_path / "out")
    table = pd.read_csv(csv)
    assert list(table.columns)[-5:] == ["median_a", "median_b", "ratio", "difference", "differs"]
    assert table.differs.sum() == 4
    html = page.read_text()
    assert html.count('<tr class="differs">') == 4
    assert "differs by more than 10%" in html and 'href="repeatability.csv"' in html


def test_ceiling_rows_are_points_too(tmp_path: Path):
    frame = study_frames.latency_study()
    first = study_frames.write(tmp_path / "a" / "latency-hiding", frame, "")
    second = frame.copy()
    second.loc[second.loader == "ceiling:cassandra", "samples_per_s"] *= 0.5
    second = study_frames.write(tmp_path / "b" / "latency-hiding", second, "")
    flagged = compare_runs(first, second).flagged
    assert set(flagged.loader) == {"ceiling:cassandra"} and len(flagged) == 4


def test_runs_of_different_studies_are_refused_unless_asked(two_runs, tmp_path: Path):
    other = tmp_path / "c" / "other"
    frame = study_frames.accelerators_study()
    study_frames.write(other, frame, QUESTION, name="other-study")
    with pytest.raises(WorkbenchError, match=r"holds study 'accelerators' and .* study 'other-study': compare two runs "
                                             r"of the same study"):
        compare_runs(two_runs[0], other)
    assert compare_runs(two_runs[0], other, any_study=True).flagged.empty


@pytest.mark.parametrize(("options", "message"), [({"metric": "no_such_metric"}, "no column 'no_such_metric'"),
                                                  ({"tolerance": 10}, "tolerance 10 must be between 0 and 1")])
def test_bad_options_get_one_clear_line(two_runs, options, message):
    with pytest.raises(WorkbenchError, match=message):
        compare_runs(*two_runs, **options)


def test_cli_compare_writes_beside_run_b(two_runs):
    result = CliRunner().invoke(app, ["compare", str(two_runs[0]), str(two_runs[1])])
    assert result.exit_code == 0, result.output
    assert "11 of 15 points agree within 10%" in result.output.replace("\n", " ")
    assert (two_runs[1] / "repeatability" / "repeatability.html").exists()
    table = pd.read_csv(two_runs[1] / "repeatability" / "repeatability.csv")
    assert table.differs.sum() == 4
    config = json.loads((two_runs[1] / "config.json").read_text())
    assert config["question"] == QUESTION
