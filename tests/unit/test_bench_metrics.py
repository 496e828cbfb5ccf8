import json
import math

import pytest

from workbench.bench.metrics import (
    STARTUP_LIMIT,
    AcceleratorTrace,
    ComputeModel,
    EpochTrace,
    accelerator_utilisations,
    max_accelerators,
    percentile,
    startup,
    summarise,
    utilisation,
    utilisation_columns,
)


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))


def steps(computes, waits, start=0.0):
    """An accelerator's trace from its steps' compute and wait times (ends follow from them)."""
    trace, now = AcceleratorTrace(), start
    for compute, wait in zip(computes, waits, strict=True):
        now += wait + compute
        trace.record(wait, compute, now)
    return trace


def test_accelerator_utilisation_leaves_the_first_step_out():
    # the first step waited 5 s (a loader's start-up): DLIO leaves it out, so AU = 3 x 0.9 / (3 x 1.0)
    trace = steps([0.9] * 4, [5.0, 0.1, 0.1, 0.1])
    assert trace.busy_s == pytest.approx(2.7) and trace.span_s == pytest.approx(3.0)
    assert utilisation(trace.busy_s, trace.span_s) == pytest.approx(0.9)
    assert math.isnan(utilisation(0.0, 3.0)) and math.isnan(utilisation(1.0, 0.0))  # no compute, or one step only
    assert math.isnan(EpochTrace(accelerators=[steps([0.9], [1.0])]).accelerator_utilisation[0])


def test_utilisations_add_each_accelerators_epochs():
    busy = steps([1.0] * 3, [0.0] * 3)  # never waits: AU 1
    starved = steps([1.0] * 3, [0.0, 1.0, 3.0])  # 2 s computed in 6 s
    first = EpochTrace(samples=96, wall_s=10.0, accelerators=[busy, starved])
    second = EpochTrace(samples=96, wall_s=10.0, accelerators=[steps([1.0] * 3, [0.0] * 3), steps([1.0] * 2, [9, 2])])
    assert accelerator_utilisations([first]) == pytest.approx([1.0, 2 / 6])
    assert accelerator_utilisations([first, second]) == pytest.approx([1.0, 3 / 9])
    assert first.samples_per_s == 9.6 and len(first.waits_s) == 6
    assert accelerator_utilisations([]) == []


def test_startup_is_apart_from_the_steady_rate():
    epochs = [EpochTrace(samples=1032, wall_s=11.0, first_batch_s=1.0, first_batch_samples=32),
              EpochTrace(samples=532, wall_s=6.0, first_batch_s=1.0, first_batch_samples=32)]
    measured = startup(epochs)
    assert measured.fraction == pytest.approx(2 / 17)
    assert measured.steady_samples_per_s == pytest.approx(1500 / 15)
    assert "12% of the measured time" in measured.note and "data.count" in measured.note
    quick = startup([EpochTrace(samples=3200, wall_s=20.0, first_batch_s=0.5, first_batch_samples=32)])
    assert quick.fraction == pytest.approx(0.025) and quick.note == ""
    nothing = startup([EpochTrace(wall_s=1.0)])  # no batch at all
    assert math.isnan(nothing.fraction) and math.isnan(nothing.steady_samples_per_s) and nothing.note == ""
    assert STARTUP_LIMIT == 0.05


@pytest.mark.parametrize("batches_per_s,compute_s,expected", [
    (100, 0.1, 11),   # 100 batches/s feed 11 accelerators at >= 90% (each needs 10 batches/s at full use)
    (9, 0.1, 1),
    (8.9, 0.1, 0),
    (50, 0.0, 0),
    (float("nan"), 0.1, 0),
])
def test_max_accelerators(batches_per_s, compute_s, expected):
    assert max_accelerators(batches_per_s, compute_s) == expected


def test_compute_model_fixed_and_normal():
    assert ComputeModel(20).draw() == pytest.approx(0.02)
    assert ComputeModel(0).draw() == 0
    draws = [ComputeModel(20, "normal", 0.5, seed=1).draw() for _ in range(3)]
    assert draws == [ComputeModel(20, "normal", 0.5, seed=1).draw() for _ in range(3)]
    normal = ComputeModel(20, "normal", 0.5, seed=2)
    values = [normal.draw() for _ in range(2000)]
    assert min(values) >= 0 and 0.018 < sum(values) / len(values) < 0.022


def test_summarise_ignores_nan():
    assert summarise([1.0, float("nan"), 3.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert math.isnan(summarise([])["median"])


def test_utilisation_columns():
    columns = utilisation_columns([0.95, 0.85, 0.9])
    assert columns["au_min"] == 0.85 and columns["au_mean"] == pytest.approx(0.9)
    assert columns["accelerator_utilisation"] == columns["au_mean"]
    assert json.loads(columns["au_per_accelerator"]) == [0.95, 0.85, 0.9]
    no_compute = utilisation_columns([float("nan")])
    assert math.isnan(no_compute["au_min"]) and math.isnan(no_compute["au_mean"])
    assert json.loads(no_compute["au_per_accelerator"]) == [None]
