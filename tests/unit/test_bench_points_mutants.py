"""Sweep points (workbench.bench.points): each axis's metadata as the sweep config and the report read it, and a
point's access by column name (tests/mutation found them unasserted)."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.bench.points import AXES, AXIS_TOPOLOGY, SERIES_KNOBS, Axis, SweepPoint, axis

VALUES = dict(rtt_ms=10.0, bandwidth_mbps=1000.0, shard_maxcount=64, shard_maxsize=None, concurrency="auto",
              prefetch_buffers=2, batch_size=32, workers=4, decode=True, compute_ms=0.0, accelerators=1, clients=None)


def test_an_axis_defaults_to_no_series_every_backend_and_no_topology():
    field = axis("network", "rtt_ms", "RTT ms")
    assert field.metadata["axis"] == Axis("network", "rtt_ms", "RTT ms", None, False, None)
    given = axis("clients", "ranks", "client ranks", series="ranks", sharded_only=True, topology="client_ranks")
    assert given.metadata["axis"] == Axis("clients", "ranks", "client ranks", "ranks", True, "client_ranks")


def test_the_axes_say_where_their_values_are_listed_and_how_they_are_shown():
    assert AXES["rtt_ms"] == Axis("network", "rtt_ms", "RTT ms")
    assert AXES["shard_maxcount"] == Axis("layout", "shard_maxcount", "shard maxcount", sharded_only=True)
    assert AXES["concurrency"] == Axis("loader", "concurrency", "conc", series="conc")
    assert AXES["clients"] == Axis("clients", "ranks", "client ranks", series="ranks", topology="client_ranks")
    assert [name for name, a in AXES.items() if a.sharded_only] == ["shard_maxcount", "shard_maxsize"]
    assert "loader" not in AXES  # the loader is what a point runs, not an axis


def test_series_knobs_and_topology_settings_come_from_the_axes():
    assert SERIES_KNOBS == {"concurrency": "conc", "prefetch_buffers": "prefetch", "batch_size": "batch",
                            "workers": "workers", "decode": "decode", "clients": "ranks"}
    assert AXIS_TOPOLOGY == {"client_ranks": "clients"}


def test_a_point_is_read_by_column_name_and_as_a_row():
    point = SweepPoint("s3-shards", **VALUES)
    assert point["loader"] == "s3-shards" and point["concurrency"] == "auto" and point["clients"] is None
    assert point.as_row() == {"loader": "s3-shards", **VALUES}
    with pytest.raises(AttributeError):
        point["nope"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.workers = 8  # type: ignore[misc]
