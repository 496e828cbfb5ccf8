"""A loader measured in a spawned process of its own, kept alive between its timed epochs.

Why a process of its own: measured in the process that measured other loaders before, a loader shares the CPU
with their clients' threads and caches and inherits their heap (fs: 0.49 of its ceiling after the other four
backends' loaders, 0.79 alone); each native ceiling runs as a program of its own too. Why kept alive: `bench
loaders` takes a loader's epochs one at a time, between its ceiling's runs (paired rounds), and a process
started afresh for each epoch would time its imports and cold caches as well (and so the loader is kept too:
`EpochRunner`).

A loader registered at run time by the caller (not by a module of the package) is unknown to a fresh process:
it runs in this one. The loader's own errors are raised here as they are; an epoch that runs too long stops
the process, and a process that dies without answering is named with its exit code.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import NamedTuple

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders import loader_class, make_loader
from workbench.loaders.base import Loader

Run = tuple[float, int, int]  # seconds, samples, bytes


class Epoch(NamedTuple):
    """One epoch of a loader, as measured."""

    run: Run
    cpu_s: float  # the process's CPU seconds (all threads)
    window: list[int] | None  # the loader's window history (None: it has no window)
    tuning: bool  # its "auto" window still searches its depth (`Window.tuning`)


Epochs = tuple[list[Run], list[float], list[list[int]]]  # timed runs, CPU seconds, window histories


def timed(run: Callable[[], tuple[int, ...]], cpu: list[float] | None = None) -> Run:
    """(seconds, samples, bytes); appends this process's CPU seconds (all its threads) to `cpu`.

    `run` returns (samples, bytes), or (samples, bytes, seconds spent connecting), which are left out of the
    time, as the native ceilings leave out theirs.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    samples, nbytes, *connecting = run()
    if cpu is not None:
        cpu.append(time.process_time() - cpu_start)
    return time.perf_counter() - start - sum(connecting), samples, nbytes


ITEMS_SUFFIX = "[items]"  # a loader measured on its per-item path: `bench loaders --items`


class EpochRunner:
    """Timed epochs of one loader in this process, one per call (`epoch`), or as much of each as `max_seconds`
    allows (slow strategies at high RTT): a steady rate.

    One loader for all of them, made and connected at the first epoch (left out of its time, as the ceilings
    leave out connecting) and told each next epoch (`set_epoch`): a training job keeps its loader from epoch
    to epoch, and with it its connections, its cached index or listing and a window "auto" has settled. So the
    first epoch is the cold one (`bench loaders` rows: `first_epoch_samples_per_s`), the others what a job reads
    at in its steady state.
    Reads batches (`Loader.batches`), the path the adapters take, or with `items` one Item at a time (the item
    API, and the hot path before batches).
    """

    def __init__(self, name: str, settings: Settings, config: dict, max_seconds: float, items: bool = False) -> None:
        loader_class(name)  # imports the loader's module now: the first timed epoch does not pay for it
        self.name, self.settings, self.config = name, settings, config
        self.max_seconds, self.items = max_seconds, items
        self._loader: Loader | None = None
        self._epoch = 0

    @property
    def loader(self) -> Loader | None:
        """The loader of every epoch (None before the first and once closed)."""
        return self._loader

    def epoch(self) -> Epoch:
        """The next epoch: (seconds, samples, bytes), its CPU seconds, the loader's window history (its last entry:
        the depth in use at the end; None for a loader without a window) and whether that window still tunes."""
        cpu: list[float] = []
        run = timed(self._read, cpu)
        history = getattr(self._loader, "window_history", None)
        return Epoch(run, cpu[0], list(history) if history else None,
                     bool(getattr(self._loader, "window_tuning", False)))

    def _read(self) -> tuple[int, int, float]:
        """(samples, bytes, seconds spent making and connecting the loader) of the next epoch."""
        connecting = 0.0
        if self._loader is None:
            start = time.perf_counter()
            self._loader = make_loader(self.name, self.settings, **self.config)
            self._loader.connect()
            connecting = time.perf_counter() - start
        loader = self._loader
        loader.set_epoch(self._epoch)
        self._epoch += 1
        samples = nbytes = 0
        deadline = time.perf_counter() + self.max_seconds
        source = iter(loader) if self.items else loader.batches()
        try:
            for chunk in source:
                samples += 1 if self.items else len(chunk)
                nbytes += len(chunk.data) if self.items else chunk.nbytes
                if time.perf_counter() > deadline:
                    break
        finally:
            source.close()  # an epoch cut short stops its reads now, not when the generator is collected
        return samples, nbytes, connecting

    def close(self) -> None:
        if self._loader is not None:
            self._loader.close()
            self._loader = None

    def __enter__(self) -> EpochRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: Connection, args: tuple) -> None:
    """In the spawned process: one epoch each time the parent sends True, until it sends False or goes away.
    A failure goes back as the exception itself (as one line if it cannot be pickled), and ends the process."""
    runner: EpochRunner | None = None
    try:
        runner = EpochRunner(*args)
        while conn.recv():
            conn.send((True, runner.epoch()))
    except EOFError:  # the parent went away
        pass
    except BaseException as exc:  # any failure is the parent's to raise
        try:
            conn.send((False, exc))
        except Exception:  # an exception that does not pickle
            conn.send((False, WorkbenchError(f"{type(exc).__name__}: {exc}")))
    finally:
        if runner is not None:
            runner.close()
        conn.close()


class LoaderProcess:
    """Timed epochs of loader `name` (`EpochRunner`) in a spawned process of its own, one per `epoch()` call.
    `fresh` says whether it runs in one (see the module docstring)."""

    def __init__(self, name: str, settings: Settings, config: dict, max_seconds: float, items: bool = False) -> None:
        self.name, self.dataset = name, config.get("dataset")
        self.fresh = loader_class(name).__module__.startswith("workbench.")
        self.limit_s = max_seconds + 10 * settings.timeout_s + 120  # an epoch stops by max_seconds
        self._here: EpochRunner | None = None
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        if not self.fresh:
            self._here = EpochRunner(name, settings, config, max_seconds, items)
            return
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs, (name, settings, config, max_seconds, items)),
                                        name=f"bench-{name}", daemon=True)
        self._process.start()
        theirs.close()  # the child holds its end now: its exit without an answer reads as EOF here

    def epoch(self) -> Epoch:
        """One more timed epoch: (seconds, samples, bytes), its CPU seconds, the loader's window history."""
        if self._here is not None:
            return self._here.epoch()
        assert self._conn is not None and self._process is not None
        try:
            self._conn.send(True)
            if not self._conn.poll(self.limit_s):
                self.close()
                raise WorkbenchError(f"bench loaders: an epoch of '{self.name}' on {self.dataset} ran over "
                                     f"{self.limit_s:.0f}s and was stopped: a smaller dataset or fewer seconds")
            ok, value = self._conn.recv()
        except (EOFError, OSError):  # the pipe closed or reset: the process is gone
            self._process.join(5)
            raise WorkbenchError(f"bench loaders: the process measuring '{self.name}' exited (code "
                                 f"{self._process.exitcode}) without a result (killed, or crashed in a native "
                                 "client): its output above says why") from None
        if not ok:
            self.close()
            raise value
        return value

    def close(self) -> None:
        """Close the loader; in a process of its own, stop that (it ends its loop on False; one that does not is
        killed)."""
        if self._here is not None:
            self._here.close()
        if self._process is None or self._conn is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):  # gone already
            self._conn.send(False)
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        self._conn.close()
        self._process = self._conn = None

    def __enter__(self) -> LoaderProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def loader_epochs(name: str, settings: Settings, config: dict, max_seconds: float, repeats: int,
                  items: bool = False) -> Epochs:
    """`repeats` timed epochs of loader `name` in this process: their (seconds, samples, bytes), CPU seconds and
    window histories."""
    with EpochRunner(name, settings, config, max_seconds, items) as runner:
        return _gather(runner.epoch() for _ in range(repeats))


def fresh_process_epochs(name: str, settings: Settings, config: dict, max_seconds: float, repeats: int,
                         items: bool = False) -> tuple[Epochs, bool]:
    """`repeats` timed epochs of loader `name` in one `LoaderProcess`, and whether it was a fresh process."""
    with LoaderProcess(name, settings, config, max_seconds, items) as process:
        return _gather(process.epoch() for _ in range(repeats)), process.fresh


def _gather(epochs: Iterable[Epoch]) -> Epochs:
    """Epochs as three lists: runs, CPU seconds, window histories (only where the loader has one)."""
    runs: list[Run] = []
    cpu: list[float] = []
    windows: list[list[int]] = []
    for run, seconds, window, _ in epochs:
        runs.append(run)
        cpu.append(seconds)
        if window:
            windows.append(window)
    return runs, cpu, windows
