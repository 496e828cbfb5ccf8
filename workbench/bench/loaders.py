"""`workbench bench loaders`: every loader against its backend's raw ceiling, at several round-trip times.

All runs go through toxiproxy (a proxy without toxics is the 0 ms baseline), so the proxy's own cost
is in every number and ratios compare like with like. The ceiling of a backend is a compiled program
sharing no code with our loaders, at the same concurrency (`workbench.bench.native_ceilings`; column
`ceiling_program`). Every row records the client's CPU time per sample and per MB, the `concurrency` asked
for (a number or "auto") and the `window` in use at the end of the last epoch (with its `window_history`).
Repeats run in paired rounds (`bench_backend`): each round times one epoch of every loader of a backend, then
one run of its ceiling; with "auto" the ceiling runs at the widest window the loaders ended with. Rows carry
median, min and max, and the full configuration; `ratio_to_ceiling` is the median of the rounds' ratios. Each
loader runs in a process of its own, kept between rounds (`workbench.bench.loader_process`), as each ceiling
is a program of its own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from workbench.backends import backend_class, make_backend
from workbench.bench.ingest import generate
from workbench.bench.loader_process import ITEMS_SUFFIX, LoaderProcess, Run, timed
from workbench.bench.native_ceilings import cpu_columns, native_ceiling_run, program_name
from workbench.concurrency import AUTO, REFERENCE_DEPTH, Concurrency
from workbench.config import PROXIED, Settings
from workbench.data import SyntheticSource
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import LOADERS, Loader, loader_class
from workbench.net.toxiproxy import Toxiproxy
from workbench.results import check_writable, write_results


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
    backend's ceiling, at each RTT, in one run of `repeats` paired rounds per backend and RTT (`bench_backend`)."""
    check_writable(results_dir)
    backends = sorted({loader_class(name).backend for name in loaders})
    dataset = prepare_data(settings, backends, count, mean_kb)
    prepare_peer_layouts(settings, loaders, dataset, count, mean_kb)
    toxiproxy = Toxiproxy(settings)
    toxiproxy.ensure_proxies()
    paths = ("", ITEMS_SUFFIX)[:2 if items else 1]
    groups = [(rtt, backend, [n + path for n in loaders if loader_class(n).backend == backend for path in paths])
              for rtt in rtts_ms for backend in backends]
    rows: list[dict] = []
    progress = tqdm(total=sum(repeats * (len(names) + 1) for *_, names in groups), desc="bench loaders", unit="run")
    try:
        for rtt, backend, names in groups:
            for proxy in PROXIED:
                toxiproxy.set_network(proxy, rtt_ms=rtt)
            measured = bench_backend(settings, backend, names, dataset, concurrency, repeats, max_seconds, progress)
            if (proxy := backend_class(backend).proxy) is not None:
                toxiproxy.check_network(proxy, rtt_ms=rtt)
            rows += [{"loader": row["loader"], "backend": backend, "rtt_ms": rtt, **row} for row in measured]
    finally:
        progress.close()
        toxiproxy.reset()
    _add_ratios_to_0ms(rows)
    write_results(results_dir, time.strftime("loaders-%Y%m%d-%H%M%S"), rows, describe_environment(settings))
    return rows


def bench_backend(settings: Settings, backend: str, names: list[str], dataset: str, concurrency: Concurrency,
                  repeats: int, max_seconds: float, progress: tqdm) -> list[dict]:
    """The rows of `names` (loaders of `backend`) and of the backend's ceiling, at the network as it is set now.

    Paired rounds: each round times one epoch of every loader, each in a `LoaderProcess` of its own kept
    between rounds with one loader in it (`EpochRunner`: round 1 is its cold epoch), then one run of the
    ceiling (with "auto", at the widest window the loaders ended with).
    `ratio_to_ceiling` is the median of the rounds' ratios, with min and max beside it: on a machine whose
    cores the servers share, the load drifts between runs, and a ratio taken within one round sees the same
    drift on both sides.
    """
    config = {"dataset": dataset, "concurrency": concurrency, "via_proxy": backend_class(backend).proxy is not None}
    native = backend_class(backend).native_ceiling is not None
    ceiling = f"ceiling:{backend}"
    runs: dict[str, list[Run]] = {name: [] for name in [*names, ceiling]}
    cpu: dict[str, list[float]] = {name: [] for name in [*names, ceiling]}
    windows: dict[str, list[int]] = {}  # each loader's window history, from its latest epoch
    depths: list[int] = []  # the ceiling's depth in each round
    processes = {name: LoaderProcess(name.removesuffix(ITEMS_SUFFIX), settings, config, max_seconds,
                                     items=name.endswith(ITEMS_SUFFIX)) for name in names}
    try:
        for _ in range(repeats):
            for name, process in processes.items():
                run, seconds, window = process.epoch()
                runs[name].append(run)
                cpu[name].append(seconds)
                if window:
                    windows[name] = window
                progress.update()
            depth = concurrency if concurrency != AUTO else \
                max((w[-1] for w in windows.values()), default=REFERENCE_DEPTH)
            depths.append(depth)
            at = {**config, "concurrency": depth}
            runs[ceiling].append(native_ceiling_run(settings, backend, at, cpu[ceiling]) if native
                                 else timed(ceiling_of(backend, settings, at), cpu[ceiling]))
            progress.update()
    finally:
        for process in processes.values():
            process.close()
    top = [s / t for t, s, _ in runs[ceiling]]
    rows = []
    for name, results in runs.items():
        rates = [s / t for t, s, _ in results]
        ratios = [rate / best for rate, best in zip(rates, top, strict=True)]
        if name == ceiling:
            window = depths
            program = program_name(backend) if native else f"python/{raw_ceiling_loader(backend)}.raw_ceiling"
            measured_in = "own program" if native else "bench process"
        else:
            window = windows.get(name, [])
            program, measured_in = None, "fresh process" if processes[name].fresh else "bench process"
        rows.append({
            "loader": name, "backend": backend, "dataset": dataset, "concurrency": concurrency,
            "window": window[-1] if window else None,
            "window_history": " ".join(map(str, window)) if window else "",
            "samples": results[0][1], "repeats": repeats,
            "samples_per_s": statistics.median(rates), "samples_per_s_min": min(rates),
            "samples_per_s_max": max(rates), "first_epoch_samples_per_s": rates[0],
            "mb_per_s": statistics.median(b / 1e6 / t for t, _, b in results),
            "ratio_to_ceiling": statistics.median(ratios), "ratio_to_ceiling_min": min(ratios),
            "ratio_to_ceiling_max": max(ratios), "ceiling_program": program, "measured_in": measured_in,
            **cpu_columns(results, cpu[name]),
        })
    return rows


def _add_ratios_to_0ms(rows: list[dict]) -> None:
    """ratio_to_0ms: each row's rate over the same loader's at the lowest RTT of the run."""
    base = {r["loader"]: r["samples_per_s"] for r in rows if r["rtt_ms"] == min(x["rtt_ms"] for x in rows)}
    for row in rows:
        row["ratio_to_0ms"] = row["samples_per_s"] / base[row["loader"]] if row["loader"] in base else float("nan")
