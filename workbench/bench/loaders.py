"""`workbench bench loaders`: every loader against its backend's raw ceiling, at several round-trip times.

All runs go through toxiproxy (a proxy without toxics is the 0 ms baseline), so the proxy's own cost
is in every number and ratios compare like with like. The ceiling of a backend is a compiled program
sharing no code with our loaders, at the same concurrency (`workbench.bench.native_ceilings`; column
`ceiling_program`). Every row records the client's CPU time per sample and per MB, the `concurrency` asked
for (a number or "auto") and the `window` in use at the end of the last epoch (with its `window_history`).
Repeats run in paired rounds (`bench_backend`): at each RTT in turn, a round times every loader of a backend, then
its ceiling, each for at least `round_seconds` (whole epochs or passes: `read_for`); with "auto" the ceiling runs
at the widest window the loaders ended with. Rows carry median, min and max, and the full configuration;
`ratio_to_ceiling` and `ratio_to_0ms` are medians of ratios taken within a round. Each
loader runs in a process of its own, kept between rounds (`workbench.bench.loader_process`), as each ceiling
is a program of its own.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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

# Untimed epochs of every loader before its timed ones: its cold one (connections, caches, code), as each ceiling
# has one untimed pass (`native_ceilings`). More while its "auto" window still searches, up to the most.
WARMUP_EPOCHS = 1
MOST_WARMUP_EPOCHS = 8
# Each loader and each ceiling reads for at least this long in a round, in whole epochs (passes), at most the most:
# an epoch of 2,000 samples can take a third of a second (s3-shards at 0 ms), and a single one that short swung
# its round's ratio from 0.68 to 1.15 on a box whose cores the servers share.
ROUND_SECONDS = 2.0
MOST_RUNS_PER_ROUND = 8


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
                  items: bool = False, warmup_epochs: int = WARMUP_EPOCHS,
                  round_seconds: float = ROUND_SECONDS) -> list[dict]:
    """Every loader (on its batch path; with `items` also on its per-item path, as `<loader>[items]`) and every
    backend's ceiling, at each RTT, in one run of `repeats` paired rounds per backend (`bench_backend`), after
    each loader's untimed `warmup_epochs` (`warm_up`), each timing at least `round_seconds` long."""
    check_writable(results_dir)
    rtts_ms = list(dict.fromkeys(rtts_ms))  # an RTT asked for twice is measured once (and counted once below)
    backends = sorted({loader_class(name).backend for name in loaders})
    dataset = prepare_data(settings, backends, count, mean_kb)
    prepare_peer_layouts(settings, loaders, dataset, count, mean_kb)
    toxiproxy = Toxiproxy(settings)
    toxiproxy.ensure_proxies()
    paths = ("", ITEMS_SUFFIX)[:2 if items else 1]
    groups = [(backend, [n + path for n in loaders if loader_class(n).backend == backend for path in paths])
              for backend in backends]
    rows: list[dict] = []
    progress = tqdm(total=len(rtts_ms) * sum((repeats + warmup_epochs) * len(names) + repeats for _, names in groups),
                    desc="bench loaders", unit="run")
    try:
        for backend, names in groups:
            network = RoundTrip(toxiproxy, backend_class(backend).proxy)
            rows += bench_backend(settings, backend, names, dataset, concurrency, repeats, max_seconds, progress,
                                  warmup_epochs, round_seconds, rtts_ms, network.set)
            network.check()
    finally:
        progress.close()
        toxiproxy.reset()
    rows.sort(key=lambda row: row["rtt_ms"])  # stable: backends in order within each RTT
    write_results(results_dir, time.strftime("loaders-%Y%m%d-%H%M%S"), rows, describe_environment(settings))
    return rows


class RoundTrip:
    """The round trip of every proxied path, set between the rounds of one backend; each change first checks that
    the one before is still in place on the backend's proxy (nobody reset toxiproxy while it was measured)."""

    def __init__(self, toxiproxy: Toxiproxy, checked: str | None) -> None:
        self.toxiproxy, self.checked, self.rtt_ms = toxiproxy, checked, None

    def set(self, rtt_ms: float) -> None:
        self.check()
        if rtt_ms != self.rtt_ms:
            for proxy in PROXIED:
                self.toxiproxy.set_network(proxy, rtt_ms=rtt_ms)
            self.rtt_ms = rtt_ms

    def check(self) -> None:
        if self.rtt_ms is not None and self.checked is not None:
            self.toxiproxy.check_network(self.checked, rtt_ms=self.rtt_ms)


@dataclass
class Timings:
    """One reader's timed rounds at one RTT: each round's sums, CPU seconds and epochs (passes)."""

    runs: list[Run] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    per_round: list[int] = field(default_factory=list)

    def add(self, measured: tuple[Run, float, int]) -> None:
        run, seconds, count = measured
        self.runs.append(run)
        self.cpu.append(seconds)
        self.per_round.append(count)

    @property
    def rates(self) -> list[float]:
        return [samples / seconds for seconds, samples, _ in self.runs]


def bench_backend(settings: Settings, backend: str, names: list[str], dataset: str, concurrency: Concurrency,
                  repeats: int, max_seconds: float, progress: tqdm, warmup_epochs: int = WARMUP_EPOCHS,
                  round_seconds: float = ROUND_SECONDS, rtts_ms: Sequence[float] = (0.0,),
                  set_rtt: Callable[[float], None] = lambda rtt_ms: None) -> list[dict]:
    """The rows of `names` (loaders of `backend`) and of the backend's ceiling at each of `rtts_ms` (`set_rtt`
    sets one: the network as it is set now when there is only one).

    Each loader runs in a `LoaderProcess` of its own at each RTT, with one loader in it for all its epochs
    (`EpochRunner`). First its untimed epochs (`warm_up`): its cold one, as the ceilings' untimed pass, and those
    an "auto" window still searches its depth in. Then paired rounds: at each RTT in turn, a round times every
    loader, then the ceiling (with "auto", at the widest window the loaders ended with at that RTT), each in
    whole epochs (passes) for at least `round_seconds` (`read_for`); a round's rate is its samples over its
    seconds. `ratio_to_ceiling` is the median of the rounds' ratios, with min and max beside it, and
    `ratio_to_0ms` the median of each round's rate over the same reader's at the lowest RTT in that round: on a
    machine whose cores the servers share, the load drifts between runs, and a ratio taken within one round
    sees the same drift on both sides.
    """
    config = {"dataset": dataset, "concurrency": concurrency, "via_proxy": backend_class(backend).proxy is not None}
    native = backend_class(backend).native_ceiling is not None
    ceiling = f"ceiling:{backend}"
    rtts_ms = list(dict.fromkeys(rtts_ms))  # an RTT asked for twice is measured once (callers other than the bench)
    timings = {(name, rtt): Timings() for rtt in rtts_ms for name in [*names, ceiling]}
    windows: dict[tuple[str, float], list[int]] = {}  # each loader's window history, from its latest epoch
    depths: dict[float, list[int]] = {rtt: [] for rtt in rtts_ms}  # the ceiling's depth in each round
    processes = {(name, rtt): LoaderProcess(name.removesuffix(ITEMS_SUFFIX), settings, config, max_seconds,
                                            items=name.endswith(ITEMS_SUFFIX)) for rtt in rtts_ms for name in names}
    warmups: dict[tuple[str, float], dict] = {}  # each loader's warm-up columns

    def epoch_of(reader: tuple[str, float]) -> tuple[Run, float]:
        epoch = processes[reader].epoch()
        if epoch.window:
            windows[reader] = epoch.window
        return epoch.run, epoch.cpu_s

    def ceiling_pass(at: dict) -> tuple[Run, float]:
        spent: list[float] = []
        run = native_ceiling_run(settings, backend, at, spent) if native else \
            timed(ceiling_of(backend, settings, at), spent)
        return run, spent[0]

    try:
        for rtt in rtts_ms:
            set_rtt(rtt)
            for name in names:
                warmups[(name, rtt)], window = warm_up(processes[(name, rtt)], warmup_epochs, progress)
                if window:
                    windows[(name, rtt)] = window
        for _ in range(repeats):
            for rtt in rtts_ms:
                set_rtt(rtt)
                for name in names:
                    timings[(name, rtt)].add(read_for(round_seconds, functools.partial(epoch_of, (name, rtt))))
                    progress.update()
                depth = concurrency if concurrency != AUTO else \
                    max((w[-1] for (_, at), w in windows.items() if at == rtt), default=REFERENCE_DEPTH)
                depths[rtt].append(depth)
                timings[(ceiling, rtt)].add(read_for(round_seconds, functools.partial(
                    ceiling_pass, {**config, "concurrency": depth})))
                progress.update()
    finally:
        for process in processes.values():
            process.close()
    base = min(rtts_ms)
    rows = []
    for (name, rtt), timed_rounds in timings.items():
        rates, results = timed_rounds.rates, timed_rounds.runs
        ratios = [rate / top for rate, top in zip(rates, timings[(ceiling, rtt)].rates, strict=True)]
        to_0ms = [rate / own for rate, own in zip(rates, timings[(name, base)].rates, strict=True)]
        if name == ceiling:
            window = depths[rtt]
            program = program_name(backend) if native else f"python/{raw_ceiling_loader(backend)}.raw_ceiling"
            measured_in = "own program" if native else "bench process"
            warmed = {"warmup_epochs": None, "warmup_samples_per_s": None, "first_epoch_samples_per_s": rates[0]}
        else:
            window = windows.get((name, rtt), [])
            program, measured_in = None, "fresh process" if processes[(name, rtt)].fresh else "bench process"
            warmed = warmups[(name, rtt)]
        rows.append({
            "loader": name, "backend": backend, "rtt_ms": rtt, "dataset": dataset, "concurrency": concurrency,
            "window": window[-1] if window else None,
            "window_history": " ".join(map(str, window)) if window else "",
            "samples": round(results[0][1] / timed_rounds.per_round[0]), "repeats": repeats,
            "runs_per_round": " ".join(map(str, timed_rounds.per_round)), "round_seconds": round_seconds,
            "samples_per_s": statistics.median(rates), "samples_per_s_min": min(rates),
            "samples_per_s_max": max(rates), **warmed,
            "mb_per_s": statistics.median(b / 1e6 / t for t, _, b in results),
            "ratio_to_ceiling": statistics.median(ratios), "ratio_to_ceiling_min": min(ratios),
            "ratio_to_ceiling_max": max(ratios),
            "ratio_to_0ms": statistics.median(to_0ms), "ratio_to_0ms_min": min(to_0ms),
            "ratio_to_0ms_max": max(to_0ms), "ceiling_program": program, "measured_in": measured_in,
            **cpu_columns(results, timed_rounds.cpu),
        })
    return rows


def read_for(least_s: float, once: Callable[[], tuple[Run, float]]) -> tuple[Run, float, int]:
    """Runs of `once` (an epoch, a ceiling's pass: its (seconds, samples, bytes) and CPU seconds) until they have
    read for `least_s` seconds: at least one, at most MOST_RUNS_PER_ROUND. Returns their sums and their count."""
    seconds = cpu = 0.0
    samples = nbytes = count = 0
    while count == 0 or (seconds < least_s and count < MOST_RUNS_PER_ROUND):
        (took, read, size), spent = once()
        seconds, samples, nbytes, cpu, count = seconds + took, samples + read, nbytes + size, cpu + spent, count + 1
    return (seconds, samples, nbytes), cpu, count


def warm_up(process: LoaderProcess, least: int, progress: tqdm) -> tuple[dict, list[int] | None]:
    """A loader's untimed epochs: `least` of them (its cold one first), and more while its "auto" window still
    searches its depth (`Window.tuning`: the re-check of its second epoch spans several short ones on a long
    round trip), at most MOST_WARMUP_EPOCHS. Returns its row's columns (how many, their rate and the cold
    epoch's: the search's cost stays in view while the timed epochs measure the depth it settled on) and its
    window history at the end."""
    rates: list[float] = []
    samples = seconds = 0.0
    epoch = None
    while len(rates) < least or (epoch is not None and epoch.tuning and len(rates) < MOST_WARMUP_EPOCHS):
        epoch = process.epoch()
        took, read, _ = epoch.run
        rates.append(read / took)
        samples, seconds = samples + read, seconds + took
        if len(rates) > least:  # one the progress bar did not count on
            progress.total = (progress.total or 0) + 1
        progress.update()
    columns = {"warmup_epochs": len(rates), "warmup_samples_per_s": samples / seconds if seconds else None,
               "first_epoch_samples_per_s": rates[0] if rates else None}
    return columns, epoch.window if epoch is not None else None
