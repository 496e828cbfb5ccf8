"""`workbench bench loaders`: every loader against its backend's raw ceiling, at several round-trip times.

All runs go through toxiproxy (a proxy without toxics is the 0 ms baseline), so the proxy's own cost
is in every number and ratios compare like with like. The ceiling of a backend is a compiled program
sharing no code with our loaders, at the same concurrency (`workbench.bench.native_ceilings`; column
`ceiling_program`). Every row records the client's CPU time per sample and per MB, the `concurrency` asked
for (a number or "auto") and the `window` in use at the end of the last epoch (with its `window_history`).
With "auto" a backend's ceiling runs after its loaders, at the widest window they ended with.
Each point is repeated; rows carry median, min and max, and the full configuration. Each loader's repeats
run in a fresh process (`fresh_process_epochs`), as each ceiling is a program of its own.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from tqdm import tqdm

from workbench.backends import backend_class, make_backend
from workbench.bench.ingest import generate
from workbench.bench.native_ceilings import cpu_columns, native_ceiling_run, program_name
from workbench.concurrency import AUTO, REFERENCE_DEPTH, Concurrency
from workbench.config import PROXIED, Settings
from workbench.data import SyntheticSource
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import LOADERS, Loader, loader_class, make_loader
from workbench.net.toxiproxy import Toxiproxy
from workbench.results import check_writable, write_results


def timed(run: Callable[[], tuple[int, ...]], cpu: list[float] | None = None) -> tuple[float, int, int]:
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


def epoch_of(name: str, settings: Settings, config: dict, max_seconds: float,
             windows: list[list[int]] | None = None, items: bool = False) -> Callable[[], tuple[int, int, float]]:
    """One epoch, or as much of it as `max_seconds` allows (slow strategies at high RTT): a steady rate.
    The run returns (samples, bytes, seconds spent in `loader.connect()`), which `timed` leaves out.

    Reads batches (`Loader.batches`), the path the adapters take, or with `items` one Item at a time (the
    item API, and the hot path before batches). Appends the loader's window history (its last entry: the
    depth in use at the end) to `windows`.
    """

    def run() -> tuple[int, int, float]:
        samples = nbytes = 0
        with make_loader(name, settings, **config) as loader:
            start = time.perf_counter()
            loader.connect()
            connecting = time.perf_counter() - start
            deadline = time.perf_counter() + max_seconds
            chunks = ((1, len(item.data)) for item in loader) if items else \
                ((len(batch), batch.nbytes) for batch in loader.batches())
            for count, size in chunks:
                samples += count
                nbytes += size
                if time.perf_counter() > deadline:
                    break
            if windows is not None and getattr(loader, "window_history", None):
                windows.append(loader.window_history)
        return samples, nbytes, connecting

    return run


Epochs = tuple[list[tuple[float, int, int]], list[float], list[list[int]]]  # timed runs, CPU seconds, windows


def loader_epochs(name: str, settings: Settings, config: dict, max_seconds: float, repeats: int,
                  items: bool = False) -> Epochs:
    """`repeats` timed epochs of loader `name` (`epoch_of`, `timed`): their (seconds, samples, bytes), CPU
    seconds and window histories."""
    cpu: list[float] = []
    windows: list[list[int]] = []
    run = epoch_of(name, settings, config, max_seconds, windows, items=items)
    return [timed(run, cpu) for _ in range(repeats)], cpu, windows


def _epochs_child(answer: Connection, args: tuple) -> None:
    """`loader_epochs(*args)` in the spawned process: its result or its exception goes back through `answer`."""
    try:
        answer.send((True, loader_epochs(*args)))
    except BaseException as exc:  # any failure is the parent's to raise, as one line if it cannot be pickled
        try:
            answer.send((False, exc))
        except Exception:  # an exception that does not pickle
            answer.send((False, WorkbenchError(f"{type(exc).__name__}: {exc}")))
    finally:
        answer.close()


def fresh_process_epochs(name: str, settings: Settings, config: dict, max_seconds: float, repeats: int,
                         items: bool = False) -> tuple[Epochs, bool]:
    """`loader_epochs` in a fresh (spawned) process, and whether it ran in one.

    Why: measured in the process that measured other loaders before, a loader shares the CPU with their
    clients' threads and caches and inherits their heap (fs: 0.49 of its ceiling after the other four
    backends' loaders, 0.79 alone); each ceiling runs as a program of its own. A loader registered at run
    time by the caller (not by a module of the package) is unknown to a fresh process: it runs in this one.
    The loader's own errors are raised here as they are; a process that runs too long is killed, one that
    dies without answering is named with its exit code.
    """
    args = (name, settings, config, max_seconds, repeats, items)
    if not loader_class(name).__module__.startswith("workbench."):
        return loader_epochs(*args), False
    limit_s = repeats * (max_seconds + 10 * settings.timeout_s) + 120  # each epoch stops by max_seconds
    context = multiprocessing.get_context("spawn")
    receive, answer = context.Pipe(duplex=False)
    process = context.Process(target=_epochs_child, args=(answer, args), name=f"bench-{name}", daemon=True)
    process.start()
    answer.close()  # the child holds the sending end now: its exit without an answer reads as EOF here
    try:
        if not receive.poll(limit_s):
            raise WorkbenchError(f"bench loaders: '{name}' ran over {limit_s:.0f}s for {repeats} epochs of "
                                 f"{config['dataset']} and was stopped: fewer repeats or a smaller dataset")
        ok, value = receive.recv()
    except EOFError:
        process.join(5)
        raise WorkbenchError(f"bench loaders: the process measuring '{name}' exited (code {process.exitcode}) without "
                             "a result (killed, or crashed in a native client): its output above says why") from None
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
        process.join(5)
    if not ok:
        raise value
    return value, True


def ceiling_of(backend: str, settings: Settings, config: dict) -> Callable[[], tuple[int, int]]:
    """The Python reference ceiling of `backend`: the plainest client loop of its loaders (`raw_ceiling_loader`)."""
    cls = loader_class(raw_ceiling_loader(backend))
    validated = cls.Config(**config)
    return lambda: cls.raw_ceiling(settings, validated)


def overrides(cls: type[Loader], hook: str) -> bool:
    """Whether a loader class gives an optional hook of `Loader` (prepare_dataset, raw_ceiling) its own body."""
    def body(method: object) -> object:
        return getattr(method, "__func__", method)

    return body(getattr(cls, hook)) is not body(getattr(Loader, hook))


def raw_ceiling_loader(backend: str) -> str:
    """The loader whose `raw_ceiling` stands for a backend with no compiled program (namesake first)."""
    candidates = [name for name in LOADERS
                  if loader_class(name).backend == backend and overrides(loader_class(name), "raw_ceiling")]
    if not candidates:
        raise WorkbenchError(f"backend '{backend}' has no ceiling: neither a native program (its descriptor's "
                             "native_ceiling) nor a loader with a raw_ceiling")
    return backend if backend in candidates else candidates[0]


def prepare_data(settings: Settings, backends: list[str], count: int, mean_kb: float) -> str:
    """Ingest one synthetic dataset into every backend (idempotent: a re-run reuses it)."""
    dataset = f"bench_loaders_{count}_{int(mean_kb)}kb"
    data = None
    for backend in backends:
        target = make_backend(backend, settings, dataset, **backend_class(backend).bench_layout)
        target.prepare(["train"])
        if len(target.stored_ids()) >= count:
            continue
        if data is None:
            data = generate(count, mean_kb)
        data.name = dataset
        ingest(data, target, check_images=False)
    return dataset


def prepare_peer_layouts(settings: Settings, loaders: list[str], dataset: str, count: int, mean_kb: float) -> None:
    """Peers that keep a layout of their own (e.g. MDS shards) write it from the same samples."""
    source = SyntheticSource(count, mean_kb=mean_kb)  # the samples `generate` makes, lazily: only a hook reads them
    for cls in {loader_class(name) for name in loaders}:
        cls.prepare_dataset(settings, dataset, source)


def bench_loaders(settings: Settings, loaders: list[str], count: int, mean_kb: float, concurrency: Concurrency,
                  rtts_ms: list[float], repeats: int, results_dir: Path, max_seconds: float = 20.0,
                  items: bool = False) -> list[dict]:
    """Every loader (on its batch path; with `items` also on its per-item path, as `<loader>[items]`) and every
    backend's ceiling, at each RTT, in one run."""
    check_writable(results_dir)
    backends = sorted({loader_class(name).backend for name in loaders})
    dataset = prepare_data(settings, backends, count, mean_kb)
    prepare_peer_layouts(settings, loaders, dataset, count, mean_kb)
    toxiproxy = Toxiproxy(settings)
    toxiproxy.ensure_proxies()
    rows: list[dict] = []
    points = [(rtt, backend, name) for rtt in rtts_ms for backend in backends  # loaders first: "auto" sizes ceilings
              for name in [*(n + path for n in loaders if loader_class(n).backend == backend
                             for path in ("", ITEMS_SUFFIX)[:2 if items else 1]), f"ceiling:{backend}"]]
    settled: dict[tuple[str, float], int] = {}  # (backend, rtt) -> the widest window its loaders ended with
    try:
        for rtt, backend, name in tqdm(points, desc="bench loaders", unit="point"):
            for proxy in PROXIED:
                toxiproxy.set_network(proxy, rtt_ms=rtt)
            proxy = backend_class(backend).proxy
            config = {"dataset": dataset, "concurrency": concurrency, "via_proxy": proxy is not None}
            cpu: list[float] = []
            windows: list[list[int]] = []
            if name.startswith("ceiling:"):  # a plain loop at a fixed depth: with "auto", the loaders' widest
                config["concurrency"] = settled.get((backend, rtt), REFERENCE_DEPTH) if concurrency == AUTO \
                    else concurrency
                windows.append([config["concurrency"]])
            native = backend_class(backend).native_ceiling is not None
            if name.startswith("ceiling:") and native:
                results = [native_ceiling_run(settings, backend, config, cpu) for _ in range(repeats)]
                measured_in = "own program"
            elif name.startswith("ceiling:"):  # a backend without a compiled ceiling: its Python reference loop
                results = [timed(ceiling_of(backend, settings, config), cpu) for _ in range(repeats)]
                measured_in = "bench process"
            else:
                (results, cpu, windows), fresh = fresh_process_epochs(
                    name.removesuffix(ITEMS_SUFFIX), settings, config, max_seconds, repeats,
                    items=name.endswith(ITEMS_SUFFIX))
                measured_in = "fresh process" if fresh else "bench process"
                if windows:
                    settled[(backend, rtt)] = max(settled.get((backend, rtt), 0), windows[-1][-1])
            if proxy is not None:
                toxiproxy.check_network(proxy, rtt_ms=rtt)
            rates = [s / t for t, s, _ in results]
            mbps = [b / 1e6 / t for t, _, b in results]
            rows.append({
                "loader": name, "backend": backend, "rtt_ms": rtt, "dataset": dataset, "concurrency": concurrency,
                "window": windows[-1][-1] if windows else None,
                "window_history": " ".join(map(str, windows[-1])) if windows else "",
                "samples": results[0][1], "repeats": repeats,
                "samples_per_s": statistics.median(rates), "samples_per_s_min": min(rates),
                "samples_per_s_max": max(rates), "mb_per_s": statistics.median(mbps),
                "ceiling_program": (program_name(backend) if native
                                    else f"python/{raw_ceiling_loader(backend)}.raw_ceiling")
                if name.startswith("ceiling:") else None,
                "measured_in": measured_in,
                **cpu_columns(results, cpu),
            })
    finally:
        toxiproxy.reset()
    _add_ratios(rows)
    write_results(results_dir, time.strftime("loaders-%Y%m%d-%H%M%S"), rows, describe_environment(settings))
    return rows


def _add_ratios(rows: list[dict]) -> None:
    """ratio_to_ceiling (same backend, same RTT) and ratio_to_0ms (same loader)."""
    ceiling = {(r["backend"], r["rtt_ms"]): r["samples_per_s"] for r in rows if r["loader"].startswith("ceiling:")}
    base = {r["loader"]: r["samples_per_s"] for r in rows if r["rtt_ms"] == min(x["rtt_ms"] for x in rows)}
    for row in rows:
        row["ratio_to_ceiling"] = row["samples_per_s"] / ceiling[(row["backend"], row["rtt_ms"])]
        row["ratio_to_0ms"] = row["samples_per_s"] / base[row["loader"]] if row["loader"] in base else float("nan")
