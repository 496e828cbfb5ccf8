"""A bounded chaos soak: epochs of real loaders while the network and the servers fail under them.

`run_chaos` runs epochs of the given loaders (through toxiproxy, ``via_proxy=True``) one after the other
for about `duration_s` seconds. In every epoch one fault from the catalogue strikes at a seeded random
moment (after a seeded number of delivered samples):

* ``reset_peer``  - toxiproxy resets every connection of the loader's path (timeout 0) for ~0.5 s;
* ``timeout``     - toxiproxy stops the data and closes connections after 0.5 s, for ~1 s;
* ``latency``     - a latency spike: +300 ms each way for 1 s;
* ``bandwidth``   - a bandwidth collapse to 50 KB/s for 1 s;
* ``restart``     - a real crash: kill -9 of the service (`ManagedProcess.kill`), then `up` restarts it
  and waits until it is healthy. MinIO and Cassandra only: Ignite keeps its data in memory, so a restart
  would lose the dataset; chaos never restarts Ignite.

Each epoch's delivered multiset of keys is compared with the ids the backend holds
(``make_backend(...).stored_ids()``; datasets with one split, as the loaders read split 'train'). The
report counts faults injected, faults survived (the epoch completed with exactly the expected
multiset), samples lost and duplicated (completed epochs), and epochs that failed with an error (a
retry budget spent). Whatever happens, toxiproxy is reset and every killed service is restarted and
healthy before `run_chaos` returns.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from workbench.backends import backend_class, make_backend
from workbench.config import Settings, get_settings
from workbench.errors import WorkbenchError, first_line, with_type
from workbench.loaders import loader_class, make_loader
from workbench.net.toxiproxy import Toxiproxy
from workbench.stack import up
from workbench.stack.process import ManagedProcess

FAULTS = ("reset_peer", "timeout", "latency", "bandwidth", "restart")
# Enough to outlast a Cassandra restart (~40-60 s): retries keep going while the server is away.
DEFAULT_RETRY: dict[str, Any] = {"retries": 60, "retry_budget_s": 120.0}


@dataclass
class FaultRecord:
    loader: str
    epoch: int
    kind: str
    target: str  # toxiproxy proxy or service name
    after_samples: int
    survived: bool = False
    lost: int = 0
    duplicated: int = 0
    error: str = ""
    epoch_s: float = 0.0


@dataclass
class ChaosReport:
    loaders: list[str]
    dataset: str
    seed: int
    duration_s: float = 0.0
    epochs: int = 0
    faults_injected: int = 0
    faults_survived: int = 0
    samples_lost: int = 0
    samples_duplicated: int = 0
    epochs_failed: int = 0
    faults: list[FaultRecord] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # services killed and brought back
    services_healthy: bool = True

    def by_loader(self) -> dict[str, dict[str, int]]:
        rows: dict[str, dict[str, int]] = {}
        for f in self.faults:
            row = rows.setdefault(f.loader, {"faults": 0, "survived": 0, "lost": 0, "duplicated": 0, "failed": 0})
            row["faults"] += 1
            row["survived"] += f.survived
            row["lost"] += f.lost
            row["duplicated"] += f.duplicated
            row["failed"] += bool(f.error)
        return rows

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """fault kind -> (injected, survived)."""
        rows: dict[str, list[int]] = {}
        for f in self.faults:
            row = rows.setdefault(f.kind, [0, 0])
            row[0] += 1
            row[1] += f.survived
        return {k: (v[0], v[1]) for k, v in rows.items()}


def proxy_of(loader: str) -> str:
    """The toxiproxy path of the loader's backend (its descriptor); a local backend has none to break."""

    backend = backend_class(loader_class(loader).backend)
    if backend.proxy is None:
        raise WorkbenchError(f"loader '{loader}' reads backend {backend.name}, which has no toxiproxy path for chaos")
    return backend.proxy


def restartable_service(loader: str) -> str | None:
    """The stack service a restart fault may kill for this loader (its backend's descriptor), or None."""

    return backend_class(loader_class(loader).backend).restartable_service


def expected_ids(settings: Settings, loader: str, dataset: str) -> Counter:
    ids = make_backend(loader_class(loader).backend, settings, dataset).stored_ids()
    if not ids:
        raise WorkbenchError(f"dataset '{dataset}' holds no sample in {loader_class(loader).backend}: ingest it first")
    return Counter(str(i) for i in ids)


class _Faults:
    """Injects one fault at a time and remembers what must be restored."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.toxi = Toxiproxy(settings)
        self.killed: set[str] = set()
        self.restarted: list[str] = []

    def _toxic(self, proxy: str, kind: str, attributes: dict[str, float], hold_s: float) -> None:
        name = f"chaos_{kind}"
        self.toxi.add_toxic(proxy, kind, attributes, "downstream", name=name)
        try:
            time.sleep(hold_s)
        finally:
            with contextlib.suppress(WorkbenchError):
                self.toxi.remove_toxic(proxy, name)

    def _restart(self, service: str) -> None:
        self.killed.add(service)
        ManagedProcess(service, self.settings.state_dir / "run").kill()
        rows = up(self.settings, [service])
        if all(r.healthy for r in rows):
            self.killed.discard(service)
            self.restarted.append(service)

    def inject(self, kind: str, target: str) -> None:
        """One fault on `target`: a toxiproxy path, or for "restart" the stack service to kill and restart."""
        if kind == "reset_peer":
            self._toxic(target, "reset_peer", {"timeout": 0}, 0.5)
        elif kind == "timeout":
            self._toxic(target, "timeout", {"timeout": 500}, 1.0)
        elif kind == "latency":
            self._toxic(target, "latency", {"latency": 300, "jitter": 0}, 1.0)
        elif kind == "bandwidth":
            self._toxic(target, "bandwidth", {"rate": 50}, 1.0)
        elif kind == "restart":
            self._restart(target)
        else:
            raise WorkbenchError(f"unknown fault '{kind}': choose from {', '.join(FAULTS)}")

    def restore(self) -> bool:
        """A clean network and every killed service healthy again; True when all are healthy."""

        healthy = True
        with contextlib.suppress(WorkbenchError):
            self.toxi.reset()
        for service in sorted(self.killed):
            try:
                rows = up(self.settings, [service])
            except WorkbenchError:
                healthy = False
                continue
            if all(r.healthy for r in rows):
                self.killed.discard(service)
                self.restarted.append(service)
            else:
                healthy = False
        return healthy and not self.killed


def _one_epoch(settings: Settings, name: str, dataset: str, epoch: int, config: dict[str, Any],
               faults: _Faults, record: FaultRecord, expected: Counter, pace_s: float) -> None:

    fault_error: list[BaseException] = []

    def strike() -> None:
        try:
            faults.inject(record.kind, record.target)
        except BaseException as exc:  # reported with the epoch
            fault_error.append(exc)

    thread: threading.Thread | None = None
    got: Counter = Counter()
    start = time.monotonic()
    try:
        with make_loader(name, settings, dataset=dataset, via_proxy=True, seed=epoch, **config) as loader:
            loader.set_epoch(epoch)
            for n, item in enumerate(loader, start=1):
                got[item.key] += 1
                if thread is None and n >= record.after_samples:
                    thread = threading.Thread(target=strike, name="chaos-fault", daemon=True)
                    thread.start()
                if pace_s:
                    time.sleep(pace_s)
        if thread is None:  # the epoch ended before the chosen moment: strike now, before the next epoch
            record.after_samples = sum(got.values())
            strike()
    except WorkbenchError as exc:
        record.error = first_line(exc)
    except Exception as exc:  # an unexpected failure is a failed epoch too, not a crashed soak
        record.error = f"unexpected {with_type(exc)}"
    finally:
        if thread is not None:
            thread.join(180)
        record.epoch_s = time.monotonic() - start
    if fault_error:
        record.error = record.error or f"fault injection failed: {fault_error[0]}"
    if not record.error:
        record.lost = sum((expected - got).values())
        record.duplicated = sum((got - expected).values())
        record.survived = record.lost == 0 and record.duplicated == 0


def run_chaos(settings: Settings, loaders: list[str], dataset: str, duration_s: float, seed: int, *,
              faults: list[str] | None = None, loader_config: dict[str, Any] | None = None,
              pace_s: float = 0.005, log=None) -> ChaosReport:
    """Epochs of `loaders` with one seeded random fault each, for about `duration_s` s (see the module doc).

    `faults`: the catalogue to draw from (default: all of FAULTS; "restart" is drawn only for loaders
    whose service may be restarted: MinIO and Cassandra). `loader_config`: settings for every loader
    (default: retries=60, retry_budget_s=120, enough to outlast a Cassandra restart). `log(line)` is
    called after each epoch. The soak may overrun `duration_s` by the epoch under way (a Cassandra
    restart: up to ~1-2 min).
    """

    if not loaders:
        raise WorkbenchError("give at least one loader to run chaos on")
    catalogue = list(faults or FAULTS)
    unknown = sorted(set(catalogue) - set(FAULTS))
    if unknown:
        raise WorkbenchError(f"unknown fault(s) {', '.join(unknown)}: choose from {', '.join(FAULTS)}")
    for name in loaders:
        loader_class(name)  # unknown names fail before anything is touched
        proxy_of(name)
    rng = random.Random(seed)
    report = ChaosReport(list(loaders), dataset, seed)
    injector = _Faults(settings)
    start = time.monotonic()
    try:
        injector.toxi.reset()
        expected = {name: expected_ids(settings, name, dataset) for name in loaders}
        epoch = 0
        while time.monotonic() - start < duration_s:
            name = loaders[epoch % len(loaders)]
            proxy = proxy_of(name)
            service = restartable_service(name)
            kinds = [k for k in catalogue if k != "restart" or service is not None]
            if not kinds:
                raise WorkbenchError(f"no fault of {', '.join(catalogue)} applies to loader {name}")
            kind = rng.choice(kinds)
            total = sum(expected[name].values())
            target = service if kind == "restart" and service is not None else proxy
            record = FaultRecord(name, epoch, kind, target, rng.randint(1, max(1, total // 2)))
            config = {**(loader_class(name).chaos_window or {}), **DEFAULT_RETRY, **(loader_config or {})}
            config = {k: v for k, v in config.items() if k in loader_class(name).Config.model_fields}
            _one_epoch(settings, name, dataset, epoch, config, injector, record, expected[name], pace_s)
            report.faults.append(record)
            report.epochs += 1
            report.faults_injected += 1
            report.faults_survived += record.survived
            report.samples_lost += record.lost
            report.samples_duplicated += record.duplicated
            report.epochs_failed += bool(record.error)
            if log is not None:
                outcome = "survived" if record.survived else (record.error or
                                                              f"lost {record.lost}, duplicated {record.duplicated}")
                log(f"epoch {epoch} {name}: {kind} on {target} after {record.after_samples} samples, "
                    f"{record.epoch_s:.1f} s: {outcome}")
            epoch += 1
    finally:
        report.services_healthy = injector.restore()
        report.restarted = injector.restarted
        report.duration_s = time.monotonic() - start
    if not report.services_healthy:
        raise WorkbenchError(f"chaos could not bring {', '.join(sorted(injector.killed)) or 'a service'} back up: "
                             "see `workbench stack status` and `workbench stack logs`")
    return report


def format_report(report: ChaosReport) -> list[str]:
    lines = [
        f"chaos on {', '.join(report.loaders)} (dataset {report.dataset}, seed {report.seed}): "
        f"{report.epochs} epochs in {report.duration_s:.0f} s",
        f"faults injected {report.faults_injected}, survived {report.faults_survived}; samples lost "
        f"{report.samples_lost}, duplicated {report.samples_duplicated}; epochs failed {report.epochs_failed}",
    ]
    for kind, (injected, survived) in sorted(report.by_kind().items()):
        lines.append(f"  {kind:<10} injected {injected:>3}  survived {survived:>3}")
    for name, row in report.by_loader().items():
        lines.append(f"  {name:<10} faults {row['faults']:>3}  survived {row['survived']:>3}  lost {row['lost']:>3}  "
                     f"duplicated {row['duplicated']:>3}  failed {row['failed']:>3}")
    for f in report.faults:
        if f.error:
            lines.append(f"  failed: epoch {f.epoch} {f.loader} ({f.kind}): {f.error}")
    return lines


def chaos_command(
    dataset: Annotated[str, typer.Option(help="dataset name, as ingested into every loader's backend")],
    loaders: Annotated[str, typer.Option(help="comma-separated loaders")] = "cassandra,s3-objects,s3-shards,ignite",
    duration: Annotated[float, typer.Option(help="seconds of soak (the last epoch may overrun)")] = 60.0,
    seed: Annotated[int, typer.Option(help="seed of the fault choice and timing")] = 0,
    faults: Annotated[str, typer.Option(help=f"comma-separated fault kinds ({', '.join(FAULTS)})")] = ",".join(FAULTS),
    retries: Annotated[int, typer.Option(min=0, help="loader setting: re-tries per request")] = 60,
    retry_budget: Annotated[float, typer.Option(min=0, help="loader setting retry_budget_s: seconds per request")] = (
        120.0),
) -> None:
    """Run a chaos soak and print faults injected/survived, samples lost/duplicated and failed epochs."""
    from rich.console import Console


    console = Console()
    names = [n.strip() for n in loaders.split(",") if n.strip()]
    kinds = [k.strip() for k in faults.split(",") if k.strip()]
    report = run_chaos(get_settings(), names, dataset, duration, seed, faults=kinds,
                       loader_config={"retries": retries, "retry_budget_s": retry_budget},
                       log=lambda line: console.print(line, highlight=False))
    for line in format_report(report):
        console.print(line, highlight=False)
    if report.samples_lost or report.samples_duplicated:  # failed epochs with a clear error are not bugs
        raise typer.Exit(1)
