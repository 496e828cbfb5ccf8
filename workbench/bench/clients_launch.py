"""Start R reader ranks with torchrun or mpirun, watch them, and leave nothing running behind.

The launching process follows each rank through its progress file (`workbench.bench.clients_rank`) and
ends the whole run, with one line naming the rank, when a rank reports an error, dies without one
(kill -9), does not start within the start timeout, makes no progress for `stall_s`, or is still reading
after `max_seconds`. Stopping is SIGTERM to the launcher's process group, SIGKILL after a grace period,
then SIGKILL to every rank pid still alive on this host (torchrun starts its ranks in sessions of their
own, so a group signal alone does not reach them; the ranks also die with their launcher, PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from workbench.bench.clients_rank import error_file, read_json, stopped_file
from workbench.config import Settings
from workbench.errors import WorkbenchError

LAUNCHERS = ("torchrun", "mpirun")
RANK_MODULE = "workbench.bench.clients_rank"
MPI_HINT = ("mpirun not found on PATH: install Open MPI (Debian/Ubuntu: apt-get install -y openmpi-bin) "
            "or use --launcher torchrun")
POLL_S = 0.25
STOP_GRACE_S = 10.0
FINISH_GRACE_S = 60.0  # after the slowest rank's deadline: the gather, rank 0's file, the launcher's exit
DONE_STATES = ("gathering", "done")


@dataclass(frozen=True)
class LaunchPlan:
    """Where the ranks run. One host by default; several with torchrun's rendezvous or mpirun's host list."""

    launcher: str = "torchrun"
    ranks: int = 1
    nnodes: int = 1  # torchrun: hosts taking part; each runs the same command with the same rdzv_endpoint
    rdzv_endpoint: str | None = None  # torchrun on several hosts: host:port of the rendezvous (on one of them)
    hosts: str | None = None  # mpirun -H, e.g. "node1:2,node2:2"; rank 0 (on the first host) is MASTER_ADDR
    master_addr: str = "127.0.0.1"  # mpirun: where rank 0's gloo store listens
    master_port: int = 0  # mpirun: 0 picks a free port here
    start_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise WorkbenchError(f"unknown launcher '{self.launcher}': use {' or '.join(LAUNCHERS)}")
        if self.ranks < 1:
            raise WorkbenchError(f"--ranks {self.ranks}: at least 1 rank")
        if self.launcher == "torchrun" and self.ranks % self.nnodes:
            raise WorkbenchError(f"--ranks {self.ranks} does not split evenly over --nnodes {self.nnodes}: "
                                 "torchrun starts the same number of ranks on every host")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise WorkbenchError(f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (a port on one of the "
                                 "hosts that every host can reach)")
        if self.launcher == "mpirun" and (self.nnodes > 1 or self.rdzv_endpoint):
            raise WorkbenchError("--nnodes/--rdzv-endpoint are torchrun's: with mpirun list the hosts with --hosts")
        if self.launcher == "torchrun" and self.hosts:
            raise WorkbenchError("--hosts is mpirun's: with torchrun run the command on every host with --nnodes "
                                 "and --rdzv-endpoint")

    @property
    def single_host(self) -> bool:
        return self.nnodes == 1 and not self.rdzv_endpoint and not self.hosts

    @property
    def local_ranks(self) -> list[int]:
        """The ranks whose progress files appear here from the start (all of them on one host)."""
        return list(range(self.ranks)) if self.single_host else []


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as WORKBENCH_* variables, so every rank uses exactly the launching process's settings."""
    env = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, list | dict):
            value = json.dumps(value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        env[f"WORKBENCH_{name.upper()}"] = str(value)
    return env


def launcher_command(plan: LaunchPlan, rank_args: list[str], forwarded: Iterable[str],
                     python: str = sys.executable, mpirun: str | None = None) -> list[str]:
    """The command that starts `plan.ranks` copies of `python -m RANK_MODULE *rank_args`.

    `forwarded`: environment variables mpirun passes to every rank (-x; torchrun's ranks inherit them).
    """
    if plan.launcher == "torchrun":
        per_host = plan.ranks // plan.nnodes
        where = ["--standalone"] if plan.single_host else [
            "--nnodes", str(plan.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", str(plan.rdzv_endpoint),
            "--rdzv-id", "workbench-clients"]
        timeouts = f"join_timeout={int(plan.start_timeout_s)},read_timeout={int(plan.start_timeout_s)}"
        return [python, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(per_host),
                "--max-restarts", "0", "--rdzv-conf", timeouts, "-m", RANK_MODULE, *rank_args]
    mpirun = mpirun or shutil.which("mpirun")
    if mpirun is None:
        raise WorkbenchError(MPI_HINT)
    command = [mpirun, "-np", str(plan.ranks), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")  # Open MPI refuses root without it (containers run as root)
    if plan.hosts:
        command += ["-H", plan.hosts]
    for name in sorted(set(forwarded)):
        command += ["-x", name]  # by name: values (credentials among them) never appear on a command line
    return [*command, python, "-m", RANK_MODULE, *rank_args]


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a rank that exited but was not reaped yet is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class RankWatch:
    """What the ranks' files say, and the one-line verdict when a rank failed, died, hung or never started."""

    def __init__(self, work_dir: Path, plan: LaunchPlan, max_seconds: float, stall_s: float) -> None:
        self.work_dir, self.plan, self.max_seconds, self.stall_s = work_dir, plan, max_seconds, stall_s
        self.started = time.monotonic()
        self.reading_since: float | None = None
        self.last_change: dict[int, tuple[int, float]] = {}  # rank -> (samples, when they last changed)
        self.host = socket.gethostname()
        self.states: dict[int, dict] = {}

    def refresh(self) -> None:
        for path in self.work_dir.glob("rank-*.progress.json"):
            state = read_json(path)
            if isinstance(state, dict) and "rank" in state:
                self.states[int(state["rank"])] = state

    @property
    def samples(self) -> int:
        return sum(int(s.get("samples", 0)) for s in self.states.values())

    def local_pids(self) -> list[int]:
        return [int(s["pid"]) for s in self.states.values() if s.get("host") == self.host and "pid" in s]

    def first_error(self) -> str | None:
        """The earliest error line (the cause; later ones are usually the other ranks losing their peer)."""
        files = [p for p in self.work_dir.glob("rank-*.error") if p.stat().st_size]
        if not files:
            return None
        return min(files, key=lambda p: p.stat().st_mtime).read_text().strip()

    def verdict(self, now: float) -> str | None:
        """None while everything is fine, else why the run must end: a rank that died on its own first (the
        others may fail or be stopped because of it), then the earliest error a rank reported."""
        self.refresh()
        dead = [r for r, s in sorted(self.states.items()) if s.get("host") == self.host
                and s.get("state") != "done" and not _alive(int(s["pid"]))
                and not error_file(self.work_dir, r).exists()]
        culprits = [r for r in dead if not stopped_file(self.work_dir, r).exists()]  # not stopped by the launcher
        if culprits:
            state = self.states[culprits[0]]
            return (f"rank {culprits[0]} (pid {state['pid']}) died without an error after {state.get('samples', 0)} "
                    "samples (killed by a signal or out of memory?)")
        error = self.first_error()
        if error:
            return error
        if dead:
            return f"rank {', '.join(map(str, dead))} stopped by {self.plan.launcher} (no rank reported why)"
        started = {r for r, s in self.states.items() if s.get("state") != "starting"}  # past the barrier
        expected = set(self.plan.local_ranks)
        if self.reading_since is None:
            if (expected and expected <= started) or (not expected and started):
                self.reading_since = now
            elif now - self.started > self.plan.start_timeout_s:
                absent = expected - self.states.keys()  # never ran a line of its own: the cause, if any
                named = ", ".join(map(str, sorted(absent or expected - started))) or "on this host"
                return (f"rank {named} did not start within {self.plan.start_timeout_s:.0f} s "
                        "(raise --start-timeout on a loaded machine)")
        for rank, state in sorted(self.states.items()):
            if state.get("state") != "reading":
                continue
            samples = int(state.get("samples", 0))
            before = self.last_change.get(rank)
            if before is None or before[0] != samples:
                self.last_change[rank] = (samples, now)
            elif now - before[1] > self.stall_s:
                return f"rank {rank} read nothing for {self.stall_s:.0f} s (stuck after {samples} samples)"
        if self.reading_since is not None and now - self.reading_since > self.max_seconds + FINISH_GRACE_S:
            late = [r for r, s in sorted(self.states.items()) if s.get("state") not in DONE_STATES]
            return (f"rank {', '.join(map(str, late)) or '?'} still running {self.max_seconds:.0f} s after the "
                    "start (--max-seconds)")
        return None


def stop(process: subprocess.Popen, rank_pids: Iterable[int]) -> None:
    """SIGTERM the launcher's group, SIGKILL after a grace period, then any rank still alive on this host."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_GRACE_S)
    for pid in rank_pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(_alive(p) for p in rank_pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1][:300] if lines else ""


def launch(command: list[str], env: dict[str, str], plan: LaunchPlan, work_dir: Path, max_seconds: float,
           stall_s: float, on_samples: Callable[[int], None] | None = None) -> None:
    """Run the launcher to the end; any failure stops every rank and raises one line naming the rank."""
    log = work_dir / "launcher.log"
    watch = RankWatch(work_dir, plan, max_seconds, stall_s)
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    failure: str | None = None
    try:
        while failure is None:
            code = process.poll()
            failure = watch.verdict(time.monotonic())
            if on_samples is not None:
                on_samples(watch.samples)
            if failure is not None or code == 0:
                break
            if code is not None:
                time.sleep(POLL_S)  # a rank's error file may land just after the launcher exits
                failure = watch.verdict(time.monotonic()) or \
                    f"{plan.launcher} exited with code {code} before the ranks finished: {_last_line(log)}"
                break
            time.sleep(POLL_S)
    finally:
        stop(process, watch.local_pids())
    if failure is not None:
        raise WorkbenchError(f"{failure} (launcher log: {log})")
