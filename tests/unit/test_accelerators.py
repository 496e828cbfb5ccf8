"""N emulated accelerators on threads: every batch is taken exactly once, each accelerator's steps are recorded,
the arithmetic follows from them. Tiny compute times; no assertion on how fast anything ran."""

import math
import threading

import pytest

from workbench.bench.accelerators import run_accelerators
from workbench.bench.metrics import ComputeModel, accelerator_utilisations, startup


def batches(count, samples=8, nbytes=100):
    for _ in range(count):
        yield samples, nbytes


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_every_batch_goes_to_exactly_one_accelerator(n):
    trace = run_accelerators(batches(40), [ComputeModel(1, seed=i) for i in range(n)])
    assert trace.samples == 320 and trace.bytes == 4000 and trace.first_batch_samples == 8
    assert len(trace.accelerators) == n
    assert sum(len(a.computes_s) for a in trace.accelerators) == 40
    assert all(c == pytest.approx(0.001) for a in trace.accelerators for c in a.computes_s)
    assert len(trace.waits_s) == 40 and all(w >= 0 for w in trace.waits_s)
    assert all(acc.ends_s == sorted(acc.ends_s) for acc in trace.accelerators)  # one step after the other
    au = accelerator_utilisations([trace])
    assert len(au) == n
    assert all(0 < a <= 1 for a in au if not math.isnan(a))  # NaN only for an accelerator that got one step
    assert trace.wall_s >= trace.first_batch_s >= 0
    assert 0 <= startup([trace]).fraction <= 1


def test_no_compute_gives_no_utilisation():
    trace = run_accelerators(batches(10), [ComputeModel(0)])
    assert trace.samples == 80 and all(math.isnan(a) for a in accelerator_utilisations([trace]))


def test_max_batches_stops_the_epoch_and_every_accelerator():
    trace = run_accelerators(batches(1000), [ComputeModel(1, seed=i) for i in range(3)], max_batches=5)
    assert trace.samples == 40 and sum(len(a.computes_s) for a in trace.accelerators) == 5
    assert not [t for t in threading.enumerate() if t.name.startswith("accelerator-")]


def test_a_failing_loader_stops_the_accelerators_and_raises():
    def failing():
        yield 8, 100
        yield 8, 100
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        run_accelerators(failing(), [ComputeModel(1, seed=i) for i in range(4)])
    assert not [t for t in threading.enumerate() if t.name.startswith("accelerator-")]


def test_normal_compute_is_drawn_per_accelerator():
    computes = [ComputeModel(2, "normal", 0.5, seed=i) for i in range(2)]
    trace = run_accelerators(batches(20), computes)
    drawn = sorted(c for a in trace.accelerators for c in a.computes_s)
    expected = [ComputeModel(2, "normal", 0.5, seed=i) for i in range(2)]
    # which accelerator took which batch depends on the threads; the 20 draws come from the two seeded streams
    assert len(set(drawn)) > 1 and all(c >= 0 for c in drawn)
    streams = {round(m.draw(), 9) for m in expected for _ in range(20)}
    assert {round(c, 9) for c in drawn} <= streams


def test_at_least_one_accelerator():
    with pytest.raises(ValueError, match="at least one"):
        run_accelerators(batches(1), [])
