"""The long-fat-network figure: the share of a capped link each loader and each native ceiling fills."""

from __future__ import annotations

import pandas as pd
import pytest
import study_frames

from workbench.report import make_report

CAPS = (100.0, 1000.0)


def link_study(scope: str = "link") -> pd.DataFrame:
    """latency_study's 'auto' and ceiling rows at two link caps: MB/s is the rate, bounded by 0.9 of the cap."""
    base = study_frames.latency_study()
    base = base[(base["concurrency"] == "auto") | base["loader"].str.startswith("ceiling:")]
    frames = []
    for cap in CAPS:
        frame = base.copy()
        frame["bandwidth_mbps"] = cap
        frame["bandwidth_scope"] = scope
        mb_per_s = (frame["samples_per_s"] * study_frames.MEAN_KB / 1000).clip(upper=0.9 * cap / 8)
        frame["samples_per_s"] = mb_per_s * 1000 / study_frames.MEAN_KB
        frame["mb_per_s"] = mb_per_s
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    frame["point_id"] = frame.groupby(["loader", "rtt_ms", "bandwidth_mbps"], sort=False).ngroup()
    return frame


def plot_of(made, name):
    return next(p for p in made if p.name == name)


@pytest.mark.parametrize("scope", ["link", "connection"])
def test_every_cap_gets_a_panel_and_no_share_passes_the_cap(tmp_path, scope):
    folder = study_frames.write(tmp_path / "long-fat-network", link_study(scope), "How much of the link?")
    page, made = make_report(folder)
    plot = plot_of(made, "link_fill")
    assert plot.path is not None and plot.path.stat().st_size > 10_000
    table = dict(plot.tables)["share of the link"]
    assert set(table["bandwidth cap Mbit/s"]) == set(CAPS)
    assert table["share of link"].max() <= 0.9 + 1e-6  # MB/s was bounded by 0.9 of the cap
    ceilings = table[table["series"].str.startswith("ceiling:")]
    assert set(ceilings["series"]) == {"ceiling: s3-objects", "ceiling: cassandra", "ceiling: s3-shards"}
    assert ("shared by all its connections" in plot.note) == (scope == "link")
    assert "link_fill.png" in page.read_text()


def test_a_sweep_without_a_cap_skips_the_figure_and_says_why(tmp_path):
    folder = study_frames.write(tmp_path / "latency", study_frames.latency_study(), "RTT?")
    _, made = make_report(folder)
    plot = plot_of(made, "link_fill")
    assert plot.path is None and "no bandwidth cap" in plot.note
