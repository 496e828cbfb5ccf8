"""`bench_backend` pairs its repeats in rounds: every loader's epochs, then ceiling passes at the loaders' window,
each for at least the round's seconds; `ratio_to_ceiling` is the median of the rounds' ratios, not a ratio of
medians taken at different times. Before the rounds, each loader's untimed epochs: its cold one, and more while
its "auto" window still searches.

The loader processes and the ceiling program are stand-ins that log their calls: what is tested is the order
of the runs and the arithmetic of the rows (the real processes and programs: tests/services/test_auto_concurrency).
"""

import os

import pytest
from tqdm import tqdm

from workbench.bench import loaders as bench
from workbench.bench.loader_process import Epoch, LoaderProcess
from workbench.errors import WorkbenchError

COLD = 50  # the rate of every stand-in's first (untimed) epoch


class StandInProcess:
    """A LoaderProcess that reads `rates` samples in one second per epoch, ending at window `window`; its window
    tunes for its first `tuning` epochs."""

    def __init__(self, name: str, log: list, rates: list[int], window: list[int], tuning: int = 0) -> None:
        self.name, self.log, self.rates, self.window, self.fresh = name, log, iter(rates), window, True
        self.tuning = tuning

    def epoch(self) -> Epoch:
        self.log.append(self.name)
        rate = next(self.rates)
        self.tuning -= 1
        return Epoch((1.0, rate, rate * 1000), 0.25, self.window, self.tuning >= 0)

    def close(self) -> None:
        self.log.append(f"close {self.name}")


def measure(monkeypatch, settings, concurrency, loader_rates, ceiling_rates, window=(4, 8), tuning=0,
            round_seconds=1.0, rounds=None):
    log: list = []
    monkeypatch.setattr(bench, "LoaderProcess", lambda name, *a, **k: StandInProcess(
        name, log, [COLD, *loader_rates], list(window), tuning))
    ceiling = iter(ceiling_rates)

    def ceiling_run(settings, backend, config, cpu):
        log.append(("ceiling", config["concurrency"]))
        cpu.append(0.5)
        rate = next(ceiling)
        return 1.0, rate, rate * 1000

    monkeypatch.setattr(bench, "native_ceiling_run", ceiling_run)
    # every stand-in epoch and pass takes 1 s: rounds of at least 1 s time one of each
    rows = bench.bench_backend(settings, "s3-objects", ["s3-objects"], "ds", concurrency,
                               rounds or len(ceiling_rates), 20.0, tqdm(disable=True), round_seconds=round_seconds)
    return log, {row["loader"]: row for row in rows}


def test_each_round_runs_the_loaders_then_the_ceiling_at_their_window(monkeypatch, settings):
    log, rows = measure(monkeypatch, settings, "auto", [100, 200, 300], [100, 400, 150])
    assert log == ["s3-objects"] + ["s3-objects", ("ceiling", 8)] * 3 + ["close s3-objects"]  # the cold epoch first
    assert rows["ceiling:s3-objects"]["window_history"] == "8 8 8" and rows["s3-objects"]["window_history"] == "4 8"
    assert (rows["s3-objects"]["warmup_epochs"], rows["s3-objects"]["first_epoch_samples_per_s"]) == (1, COLD)


def test_a_window_that_still_searches_gets_more_untimed_epochs_up_to_the_most(monkeypatch, settings):
    # still searching at the end of epochs 1 and 2, done in epoch 3 (untimed too: it searched part of it)
    log, rows = measure(monkeypatch, settings, "auto", [70, 90, 100, 200, 300], [100, 400, 150], tuning=2)
    assert log[:5] == ["s3-objects"] * 4 + [("ceiling", 8)]
    loader = rows["s3-objects"]
    assert (loader["warmup_epochs"], loader["first_epoch_samples_per_s"]) == (3, COLD)
    assert loader["warmup_samples_per_s"] == (COLD + 70 + 90) / 3 and loader["samples_per_s"] == 200
    _, rows = measure(monkeypatch, settings, "auto", [70] * (bench.MOST_WARMUP_EPOCHS + 3), [100] * 3, tuning=99)
    assert rows["s3-objects"]["warmup_epochs"] == bench.MOST_WARMUP_EPOCHS


def test_the_ratio_is_the_median_of_the_rounds_ratios(monkeypatch, settings):
    # rounds: 100/100, 200/400, 300/150 -> 1.0, 0.5, 2.0; the ratio of the medians would say 200/150
    _, rows = measure(monkeypatch, settings, "auto", [100, 200, 300], [100, 400, 150])
    loader, ceiling = rows["s3-objects"], rows["ceiling:s3-objects"]
    assert (loader["ratio_to_ceiling"], loader["ratio_to_ceiling_min"], loader["ratio_to_ceiling_max"]) == (1.0, 0.5,
                                                                                                            2.0)
    assert loader["samples_per_s"] == 200 and ceiling["samples_per_s"] == 150 and ceiling["ratio_to_ceiling"] == 1.0
    assert loader["cpu_us_per_sample"] == 0.25 / 200 * 1e6 and loader["measured_in"] == "fresh process"
    assert ceiling["measured_in"] == "own program" and ceiling["ceiling_program"]


def test_a_fixed_concurrency_is_the_ceilings_whatever_the_loaders_ended_with(monkeypatch, settings):
    log, rows = measure(monkeypatch, settings, 16, [100, 100], [100, 100], window=(16,))
    assert [entry for entry in log if isinstance(entry, tuple)] == [("ceiling", 16)] * 2
    assert rows["ceiling:s3-objects"]["window"] == 16


def test_a_round_times_whole_epochs_and_passes_until_it_has_read_for_its_seconds(monkeypatch, settings):
    # rounds of at least 2.5 s: three 1 s epochs of the loader, then three passes of the ceiling
    log, rows = measure(monkeypatch, settings, "auto", [100, 200, 300, 400, 400, 400], [300, 300, 300, 100, 100, 100],
                        round_seconds=2.5, rounds=2)
    assert log == ["s3-objects"] + (["s3-objects"] * 3 + [("ceiling", 8)] * 3) * 2 + ["close s3-objects"]
    loader, ceiling = rows["s3-objects"], rows["ceiling:s3-objects"]
    assert loader["runs_per_round"] == ceiling["runs_per_round"] == "3 3" and loader["round_seconds"] == 2.5
    # a round's rate is its samples over its seconds: 600/3 and 1200/3 s; against 300 and 100: 2/3 and 4
    assert (loader["samples_per_s_min"], loader["samples_per_s_max"]) == (200, 400)
    assert (loader["ratio_to_ceiling_min"], loader["ratio_to_ceiling_max"]) == (200 / 300, 4.0)
    assert loader["samples"] == 200 and ceiling["samples"] == 300  # one epoch's (pass's) samples, as before
    assert loader["cpu_us_per_sample"] == (0.75 / 600 + 0.75 / 1200) / 2 * 1e6  # each round's CPU over its samples


def test_every_rtt_has_its_own_processes_and_each_round_visits_every_rtt_in_turn(monkeypatch, settings):
    log: list = []
    made = iter([("near", [COLD, 100, 200, 300]), ("far", [COLD, 90, 100, 330])])  # at 0 ms, then at 50 ms

    def process(name, *args, **kwargs):
        which, rates = next(made)
        return StandInProcess(which, log, rates, [4, 8])

    monkeypatch.setattr(bench, "LoaderProcess", process)
    ceiling = iter([100, 100, 200, 200, 300, 300])

    def ceiling_run(settings, backend, config, cpu):
        log.append("ceiling")
        cpu.append(0.5)
        rate = next(ceiling)
        return 1.0, rate, rate * 1000

    monkeypatch.setattr(bench, "native_ceiling_run", ceiling_run)
    rows = bench.bench_backend(settings, "s3-objects", ["s3-objects"], "ds", "auto", 3, 20.0, tqdm(disable=True),
                               round_seconds=1.0, rtts_ms=[0.0, 50.0, 0.0], set_rtt=lambda rtt: log.append(rtt))
    assert log == [0.0, "near", 50.0, "far"] + [0.0, "near", "ceiling", 50.0, "far", "ceiling"] * 3 + [
        "close near", "close far"]  # 0 ms asked for twice: measured once
    assert len(rows) == 4
    by = {(row["loader"], row["rtt_ms"]): row for row in rows}
    # the same round's rates: 90/100, 100/200, 330/300 -> a median of 0.9 (a ratio of medians would say 1.0)
    loader = by[("s3-objects", 50.0)]
    assert (loader["ratio_to_0ms"], loader["ratio_to_0ms_min"], loader["ratio_to_0ms_max"]) == (0.9, 0.5, 1.1)
    assert by[("s3-objects", 0.0)]["ratio_to_0ms"] == 1.0 and by[("ceiling:s3-objects", 50.0)]["ratio_to_0ms"] == 1.0
    assert loader["ratio_to_ceiling"] == 0.9 and by[("s3-objects", 0.0)]["ratio_to_ceiling"] == 1.0


def test_read_for_reads_once_at_least_and_at_most_the_most():
    def once():
        return (0.5, 10, 100), 0.1

    assert bench.read_for(0.0, once) == ((0.5, 10, 100), 0.1, 1)
    assert bench.read_for(1.2, once)[2] == 3  # 0.5, 1.0, then 1.5 >= 1.2
    assert bench.read_for(1e9, once)[2] == bench.MOST_RUNS_PER_ROUND


class ExitsWhenUnpickled:
    """An argument that ends the spawned process (exit code 3) while it unpickles its arguments."""

    def __reduce__(self):
        return os._exit, (3,)


def test_a_loader_process_that_dies_is_named_with_its_exit_code(settings):
    process = LoaderProcess("fs", settings, {"dataset": "x", "dies": ExitsWhenUnpickled()}, 5.0)
    try:
        with pytest.raises(WorkbenchError, match=r"'fs' exited \(code 3\) without a result"):
            process.epoch()
    finally:
        process.close()
