import math

import pytest

from workbench.bench.metrics import ComputeModel, EpochTrace, max_accelerators, percentile, summarise


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))


def test_accelerator_utilisation_is_compute_over_wall():
    trace = EpochTrace(samples=100, wall_s=10.0, computes_s=[0.9] * 10)
    assert trace.accelerator_utilisation == pytest.approx(0.9)
    assert trace.samples_per_s == 10
    assert math.isnan(EpochTrace(wall_s=1.0).accelerator_utilisation)


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
