"""`timed` leaves a run's connecting seconds out of its time, as the native ceilings do."""

from workbench.bench import loader_process as loaders


def test_connecting_seconds_are_left_out(monkeypatch):
    clock = iter([10.0, 13.0])  # perf_counter at the start and at the end of the run
    monkeypatch.setattr(loaders.time, "perf_counter", lambda: next(clock))
    cpu: list[float] = []
    assert loaders.timed(lambda: (100, 5000, 1.0), cpu) == (2.0, 100, 5000)
    assert len(cpu) == 1


def test_a_run_without_connecting_seconds_keeps_its_whole_time(monkeypatch):
    clock = iter([10.0, 13.0])
    monkeypatch.setattr(loaders.time, "perf_counter", lambda: next(clock))
    assert loaders.timed(lambda: (100, 5000)) == (3.0, 100, 5000)
