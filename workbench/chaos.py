"""A bounded chaos soak: epochs of real loaders while the network and the servers fail under them.

`run_chaos` runs epochs of the given loaders (through toxiproxy, ``via_proxy=True``) one after the other
for about `duration_s` seconds, counted after the set-up (at least one epoch). In every epoch one fault
from the catalogue strikes at a seeded random moment (after a seeded number of delivered samples):

* ``reset_peer``  - toxiproxy resets every connection of the loader's path (timeout 0) for ~0.5 s;
* ``timeout``     - toxiproxy stops the data and closes connections after 0.5 s, for ~1 s;
* ``latency``     - a latency spike: +300 ms each way for 1 s;
* ``bandwidth``   - a bandwidth collapse to 50 KB/s for 1 s;
* ``restart``     - a real crash: kill -9 of the service (`ManagedProcess.kill`), then `up` restarts it
  and waits until it is healthy. MinIO and Cassandra only: Ignite keeps its data in memory, so a restart
  would lose the dataset; chaos never restarts Ignite.
* ``node_kill``   - in a cluster (`stack up --nodes N`): kill -9 of one node other than node 0, which
  stays down for the node window (`node_window_s`, 5 s), then `up` restarts it and waits until it is
  healthy. Every node holds copies of the others' data (replication factor 3, one Ignite backup, an
  erasure set), so the epoch still reads every sample; Ignite's restarted node rejoins and takes its
  backups back from the others.
* ``partition``   - one node other than node 0 is cut off for the node window, then reconnected. With
  node_network=netns the host end of its veth goes down: clients and its peers lose it (a real network
  partition). On loopback nodes (no namespaces) its toxiproxy proxies are disabled: the clients lose it,
  its peers do not; MinIO's clients talk to node 0 only, so there it cuts nothing they use (netns does).

Node faults apply to loaders whose backend's path is served by more than one node of the local stack
(the nodes behind the path's proxies, `workbench.stack.manager.nodes_behind`); the victim is drawn with
the soak's seed. Each record names the node, how it was hit (``how``: the pid killed, the veth cut or the
proxies disabled), how long it was away (``window_s``) and its recovery time (``recovery_s``: from the
restart or reconnection until the node's own health probe passes again).

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
from typing import Any

from workbench.backends import backend_class, make_backend
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line, with_type
from workbench.loaders import loader_class, make_loader
from workbench.net import netns
from workbench.net.toxiproxy import Toxiproxy
from workbench.stack import up
from workbench.stack.manager import nodes_behind, process_of, select
from workbench.stack.process import ManagedProcess
from workbench.stack.service import Service

FAULTS = ("reset_peer", "timeout", "latency", "bandwidth", "restart", "node_kill", "partition")
NODE_FAULTS = ("node_kill", "partition")  # strike one node of a cluster (see the module doc)
NODE_WINDOW_S = 5.0  # how long a node fault keeps the node away
EPOCH_JOIN_S = 900.0  # the longest an epoch waits for its fault to finish (a ring node's restart included)
# Enough to outlast a Cassandra restart (~40-60 s): retries keep going while the server is away.
DEFAULT_RETRY: dict[str, Any] = {"retries": 60, "retry_budget_s": 120.0}


@dataclass
class FaultRecord:
    loader: str
    epoch: int
    kind: str
    target: str  # toxiproxy proxy, service name, or for node faults the node's name (`cassandra-2`)
    after_samples: int
    how: str = ""  # node faults: what was done (the pid killed, the veth cut, the proxies disabled)
    window_s: float = 0.0  # node faults: how long the node was away (killed or cut off)
    recovery_s: float = 0.0  # node faults: from its restart or reconnection until its health probe passes
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


def node_targets(settings: Settings, loader: str) -> list[str]:
    """The nodes a node fault may strike for this loader: every node but node 0 behind its backend's path
    (node 0 is the seed, the first contact point and S3's one endpoint); none without a local cluster."""
    if settings.stack != "local":
        return []
    return [node.node_name for node in nodes_behind(settings, proxy_of(loader))[1:]]


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

    def __init__(self, settings: Settings, node_window_s: float = NODE_WINDOW_S) -> None:
        self.settings = settings
        self.node_window_s = node_window_s
        self.toxi = Toxiproxy(settings)
        self.killed: set[str] = set()  # services or nodes (by name) killed and not yet healthy again
        self.cut: set[str] = set()  # namespaces whose link is down
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
        self._up(service)

    def _up(self, name: str) -> None:
        """Start a killed service or node again and wait until it is healthy; raise naming it when it is not."""
        rows = up(self.settings, [name])
        if all(r.healthy for r in rows):
            self.killed.discard(name)
            self.restarted.append(name)
            return
        broken = "; ".join(f"{r.service}: {r.detail}" for r in rows if not r.healthy)
        raise WorkbenchError(f"{name} is not healthy after its restart ({first_line(broken, 300)})")

    def _node_kill(self, node: Service, record: FaultRecord) -> None:
        process = process_of(node)
        pid = process.pid()
        if pid is None:
            raise WorkbenchError(f"{node.node_name} at {node.address()} is not running: nothing to kill "
                                 "(`workbench stack status`)")
        self.killed.add(node.node_name)
        record.how = f"kill -9 of pid {pid}, restarted by `stack up {node.node_name}`"
        struck = time.monotonic()
        process.kill()
        time.sleep(self.node_window_s)
        back = time.monotonic()
        record.window_s = back - struck
        try:
            self._up(node.node_name)
        finally:
            record.recovery_s = time.monotonic() - back

    def _partition(self, node: Service, record: FaultRecord) -> None:
        namespace = node.namespace
        if namespace is not None:
            self.cut.add(namespace)
            veth = netns.set_link(namespace, up=False)
            record.how = f"netns: veth {veth} of {namespace} down (cut from the clients and its peers)"
        else:
            proxies = self.toxi.node_proxies(node.node)
            for proxy in proxies:
                self.toxi.set_enabled(proxy, False)
            record.how = (f"loopback: toxiproxy proxies {', '.join(proxies)} disabled (cut from the clients; "
                          "its peers still reach it)")
        struck = time.monotonic()
        try:
            time.sleep(self.node_window_s)
        finally:
            if namespace is not None:
                netns.set_link(namespace, up=True)
                self.cut.discard(namespace)
            else:
                for proxy in proxies:
                    self.toxi.set_enabled(proxy, True)
            back = time.monotonic()
            record.window_s = back - struck
        self._wait_healthy(node)
        record.recovery_s = time.monotonic() - back

    @staticmethod
    def _wait_healthy(node: Service) -> None:
        deadline = time.monotonic() + node.startup_timeout_s
        health = node.health()
        while not health.healthy and time.monotonic() < deadline:
            time.sleep(0.5)
            health = node.health()
        if not health.healthy:
            raise WorkbenchError(f"{node.node_name} at {node.address()} is not healthy "
                                 f"{node.startup_timeout_s:.0f} s after its link came back: {health.detail}")

    def inject(self, record: FaultRecord) -> None:
        """The record's fault on its target: a toxiproxy path, for "restart" the stack service to kill and
        restart, for node faults the node to kill or cut off (the record gets what was done and how long)."""
        kind, target = record.kind, record.target
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
        elif kind == "node_kill":
            self._node_kill(select(self.settings, [target])[0], record)
        elif kind == "partition":
            self._partition(select(self.settings, [target])[0], record)
        else:
            raise WorkbenchError(f"unknown fault '{kind}': choose from {', '.join(FAULTS)}")

    def restore(self) -> bool:
        """A clean network (proxies enabled, links up) and every killed service or node healthy again; True
        when all are healthy."""

        healthy = True
        with contextlib.suppress(WorkbenchError):
            self.toxi.reset()
        for namespace in sorted(self.cut):
            try:
                netns.set_link(namespace, up=True)
                self.cut.discard(namespace)
            except WorkbenchError:
                healthy = False
        for service in sorted(self.killed):
            try:
                self._up(service)
            except WorkbenchError:
                healthy = False
        return healthy and not self.killed and not self.cut


def _one_epoch(settings: Settings, name: str, dataset: str, epoch: int, config: dict[str, Any],
               faults: _Faults, record: FaultRecord, expected: Counter, pace_s: float) -> None:

    fault_error: list[BaseException] = []

    def strike() -> None:
        try:
            faults.inject(record)
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
            thread.join(EPOCH_JOIN_S)
        record.epoch_s = time.monotonic() - start
    if fault_error:
        record.error = record.error or f"fault injection failed: {fault_error[0]}"
    if not record.error:
        record.lost = sum((expected - got).values())
        record.duplicated = sum((got - expected).values())
        record.survived = record.lost == 0 and record.duplicated == 0


def run_chaos(settings: Settings, loaders: list[str], dataset: str, duration_s: float, seed: int, *,
              faults: list[str] | None = None, loader_config: dict[str, Any] | None = None,
              pace_s: float = 0.005, node_window_s: float = NODE_WINDOW_S, log=None) -> ChaosReport:
    """Epochs of `loaders` with one seeded random fault each, for about `duration_s` s (see the module doc).

    `faults`: the catalogue to draw from (default: all of FAULTS; "restart" is drawn only for loaders
    whose service may be restarted: MinIO and Cassandra; node faults only for loaders read from a cluster
    of the local stack). `loader_config`: settings for every loader (default: retries=60,
    retry_budget_s=120, enough to outlast a Cassandra restart). `node_window_s`: how long a node fault
    keeps its node away. `log(line)` is called after each epoch. The soak may overrun `duration_s` by the
    epoch under way (a Cassandra restart: up to ~1-2 min, a ring node's more).
    """

    if not loaders:
        raise WorkbenchError("give at least one loader to run chaos on")
    catalogue = list(faults or FAULTS)
    unknown = sorted(set(catalogue) - set(FAULTS))
    if unknown:
        raise WorkbenchError(f"unknown fault(s) {', '.join(unknown)}: choose from {', '.join(FAULTS)}")
    if node_window_s < 0:
        raise WorkbenchError(f"node window {node_window_s:g} s: give 0 or more seconds")
    for name in loaders:
        loader_class(name)  # unknown names fail before anything is touched
        proxy_of(name)
    victims = {name: node_targets(settings, name) if set(catalogue) & set(NODE_FAULTS) else [] for name in loaders}
    applicable = {name: applicable_faults(catalogue, name, victims[name]) for name in loaders}
    rng = random.Random(seed)
    report = ChaosReport(list(loaders), dataset, seed)
    injector = _Faults(settings, node_window_s)
    start = time.monotonic()
    try:
        injector.toxi.reset()
        expected = {name: expected_ids(settings, name, dataset) for name in loaders}
        epoch, soak_start = 0, time.monotonic()
        while epoch == 0 or time.monotonic() - soak_start < duration_s:  # at least one epoch, whatever the set-up took
            name = loaders[epoch % len(loaders)]
            proxy = proxy_of(name)
            service = restartable_service(name)
            kinds = applicable[name]
            kind = rng.choice(kinds)
            total = sum(expected[name].values())
            target = (service if kind == "restart" and service is not None
                      else rng.choice(victims[name]) if kind in NODE_FAULTS else proxy)
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
                log(epoch_line(record))
            epoch += 1
    finally:
        report.services_healthy = injector.restore()
        report.restarted = injector.restarted
        report.duration_s = time.monotonic() - start
    if not report.services_healthy:
        lost = sorted(injector.killed | injector.cut)
        raise WorkbenchError(f"chaos could not bring {', '.join(lost) or 'a service'} back up: "
                             "see `workbench stack status` and `workbench stack logs`")
    return report


def applicable_faults(catalogue: list[str], loader: str, victims: list[str]) -> list[str]:
    """The faults of `catalogue` that can strike `loader`: a restart needs a restartable service, a node fault a
    node to strike (`node_targets`); none is an error naming why."""
    service = restartable_service(loader)
    kinds = [k for k in catalogue if (k != "restart" or service is not None) and (k not in NODE_FAULTS or victims)]
    if not kinds:
        why = ("; node faults need a cluster of the local stack (`workbench stack up --nodes 3`)"
               if set(catalogue) & set(NODE_FAULTS) else "")
        raise WorkbenchError(f"no fault of {', '.join(catalogue)} applies to loader {loader}{why}")
    return kinds


def epoch_line(f: FaultRecord) -> str:
    """One epoch's fault and outcome, as the soak logs it."""
    outcome = "survived" if f.survived else (f.error or f"lost {f.lost}, duplicated {f.duplicated}")
    node = (f" ({f.how}; away {f.window_s:.1f} s, healthy {f.recovery_s:.1f} s after it came back)"
            if f.kind in NODE_FAULTS and f.how else "")
    return (f"epoch {f.epoch} {f.loader}: {f.kind} on {f.target}{node} after {f.after_samples} samples, "
            f"{f.epoch_s:.1f} s: {outcome}")


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
        if f.kind in NODE_FAULTS and f.how:
            lines.append(f"  {f.kind:<10} epoch {f.epoch} {f.target}: away {f.window_s:.1f} s, recovered in "
                         f"{f.recovery_s:.1f} s ({f.how})")
    for f in report.faults:
        if f.error:
            lines.append(f"  failed: epoch {f.epoch} {f.loader} ({f.kind}): {f.error}")
    return lines


def fault_names(text: str) -> list[str]:
    """Comma-separated fault kinds; `node-kill` is accepted for `node_kill`."""
    return [k.strip().replace("-", "_") for k in text.split(",") if k.strip()]
