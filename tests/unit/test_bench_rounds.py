"""`bench_backend` pairs its repeats in rounds: every loader's epoch, then a ceiling run at the loaders' window;
`ratio_to_ceiling` is the median of the rounds' ratios, not a ratio of medians taken at different times.

The loader processes and the ceiling program are stand-ins that log their calls: what is tested is the order
of the runs and the arithmetic of the rows (the real processes and programs: tests/services/test_auto_concurrency).
"""

import os

import pytest
from tqdm import tqdm

from workbench.bench import loaders as bench
from workbench.bench.loader_process import LoaderProcess
from workbench.errors import WorkbenchError


class StandInProcess:
    """A LoaderProcess that reads `rates` samples in one second per epoch, ending at window `window`."""

    def __init__(self, name: str, log: list, rates: list[int], window: list[int]) -> None:
        self.name, self.log, self.rates, self.window, self.fresh = name, log, iter(rates), window, True

    def epoch(self):
        self.log.append(self.name)
        rate = next(self.rates)
        return (1.0, rate, rate * 1000), 0.25, self.window

    def close(self) -> None:
        self.log.append(f"close {self.name}")


def measure(monkeypatch, settings, concurrency, loader_rates, ceiling_rates, window=(4, 8)):
    log: list = []
    monkeypatch.setattr(bench, "LoaderProcess", lambda name, *a, **k: StandInProcess(name, log, loader_rates,
                                                                                      list(window)))
    ceiling = iter(ceiling_rates)

    def ceiling_run(settings, backend, config, cpu):
        log.append(("ceiling", config["concurrency"]))
        cpu.append(0.5)
        rate = next(ceiling)
        return 1.0, rate, rate * 1000

    monkeypatch.setattr(bench, "native_ceiling_run", ceiling_run)
    rows = bench.bench_backend(settings, "s3-objects", ["s3-objects"], "ds", concurrency, len(ceiling_rates), 20.0,
                               tqdm(disable=True))
    return log, {row["loader"]: row for row in rows}


def test_each_round_runs_the_loaders_then_the_ceiling_at_their_window(monkeypatch, settings):
    log, rows = measure(monkeypatch, settings, "auto", [100, 200, 300], [100, 400, 150])
    assert log == ["s3-objects", ("ceiling", 8)] * 3 + ["close s3-objects"]
    assert rows["ceiling:s3-objects"]["window_history"] == "8 8 8" and rows["s3-objects"]["window_history"] == "4 8"


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
