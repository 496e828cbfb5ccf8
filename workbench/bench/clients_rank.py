"""One reader rank of `workbench bench clients`, as torchrun or mpirun starts it (`python -m` this module).

Each rank joins a gloo process group (CPU), waits at a barrier so that all ranks start together, reads its
shard for one epoch through the normal loader (shard_id = its rank unless `--shards` says otherwise,
num_shards = the world size), optionally sleeping `--compute-ms` per batch (an emulated accelerator step),
then sends what it read to rank 0, which writes every rank's result to `ranks.json` in `--work-dir`.

What the launching process watches, in `--work-dir`: `rank-<r>.progress.json` (pid, host, state, samples
so far, rewritten at most twice a second), `rank-<r>.error` (one line, when the rank failed) and
`rank-<r>.stopped` (its launcher stopped it: another rank failed first). A rank
never outlives its deadline (start timeout + max seconds + a grace period) nor its launcher (PDEATHSIG).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

from workbench.bench.clients_metrics import RankResult
from workbench.bench.metrics import ComputeModel
from workbench.config import get_settings
from workbench.errors import WorkbenchError, first_line, with_type
from workbench.loaders import make_loader

RESULTS_FILE = "ranks.json"
GRACE_S = 60.0  # beyond start + reading: the gather of every rank's ids
PROGRESS_EVERY_S = 0.5
# Environment variables that name a rank and the world size: torchrun, Open MPI, MPICH / Intel MPI.
RANK_VARIABLES = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"))


def progress_file(work_dir: Path, rank: int) -> Path:
    return work_dir / f"rank-{rank}.progress.json"


def error_file(work_dir: Path, rank: int) -> Path:
    return work_dir / f"rank-{rank}.error"


def write_json(path: Path, value: object) -> None:
    """Whole or absent: the launching process may read it at any moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)


def stopped_file(work_dir: Path, rank: int) -> Path:
    """Written when the launcher stops this rank (SIGTERM): it died because another rank did, not on its own."""
    return work_dir / f"rank-{rank}.stopped"


def read_json(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def rank_and_world(environ: dict[str, str] | os._Environ = os.environ) -> tuple[int, int]:
    """(rank, world size) from the launcher's environment; an error when no launcher started this process."""
    for rank_name, size_name in RANK_VARIABLES:
        if rank_name in environ and size_name in environ:
            return int(environ[rank_name]), int(environ[size_name])
    names = ", ".join(f"{r}/{s}" for r, s in RANK_VARIABLES)
    raise WorkbenchError(f"no rank in the environment ({names}): start this module with torchrun or mpirun, "
                         "or use `workbench bench clients`")


class Progress:
    """This rank's progress file: what the launching process shows and uses to find a dead or stuck rank."""

    def __init__(self, work_dir: Path, rank: int) -> None:
        self.path = progress_file(work_dir, rank)
        self.state = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "state": "starting",
                      "samples": 0, "at": time.time()}
        self.last = 0.0

    def set(self, state: str | None = None, samples: int | None = None, force: bool = True) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_EVERY_S:
            return
        if state is not None:
            self.state["state"] = state
        if samples is not None:
            self.state["samples"] = samples
        self.state["at"] = time.time()
        self.last = now
        write_json(self.path, self.state)


def _die_with_launcher() -> None:
    """Linux: SIGKILL this rank when its launcher dies, so a killed launcher leaves no orphan ranks."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher is already gone
        os._exit(3)


def _on_stop(marker: Path) -> None:
    """SIGTERM (the launcher ending the run because of another rank): leave a marker, then exit at once."""

    def stopped(signum: int, frame: object) -> None:
        marker.write_text("stopped by the launcher\n")
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stopped)


def _watchdog(seconds: float, errors: Path, rank: int) -> None:
    """End this rank, with its error line, if it is still running after `seconds` (a hang somewhere)."""

    def expire() -> None:
        errors.write_text(f"rank {rank} still running after its deadline of {seconds:.0f} s: killed itself\n")
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def read_shard(loader: str, config: dict, compute_ms: float, max_seconds: float, rank: int, shard_id: int,
               progress: Progress) -> RankResult:
    """One epoch of this rank's shard, timed from the loader's creation, with emulated compute per batch."""
    result = RankResult(rank=rank, shard_id=shard_id, host=socket.gethostname())
    compute = ComputeModel(compute_ms, seed=rank)
    start = time.perf_counter()
    deadline = start + max_seconds

    def step() -> None:
        if not result.steps:  # the first batch is in hand: start-up ends here, before its compute
            result.first_batch_s = time.perf_counter() - start
            result.first_batch_samples = result.samples
        spent = compute.draw()
        if spent:
            time.sleep(spent)
        result.steps += 1
        if result.steps == 1:
            result.first_step_s = time.perf_counter() - start
        else:
            result.compute_s += spent

    with make_loader(loader, get_settings(), **config) as reader:
        batch_size, in_step = reader.config.batch_size, 0
        for item in reader:
            result.ids.append(item.key)
            result.samples += 1
            result.bytes += len(item.data)
            in_step += 1
            if in_step == batch_size:
                step()
                in_step = 0
            progress.set(samples=result.samples, force=False)
            if time.perf_counter() > deadline:
                raise WorkbenchError(f"did not finish its shard within {max_seconds:.0f} s "
                                     f"({result.samples} samples read): raise --max-seconds or read less")
        if in_step:
            step()
        result.wall_s = time.perf_counter() - start
    return result


def run_rank(args: argparse.Namespace, rank: int, world: int, progress: Progress) -> None:
    import torch.distributed as dist

    work_dir = Path(args.work_dir)
    shards = [int(s) for s in args.shards.split(",")] if args.shards else list(range(world))
    if len(shards) != world:
        raise WorkbenchError(f"--shards names {len(shards)} shards for {world} ranks: give one per rank")
    timeout = timedelta(seconds=args.start_timeout + args.max_seconds + GRACE_S)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    try:
        dist.barrier()  # every rank starts reading at the same moment
        progress.set("reading")
        config = {**json.loads(args.config), "shard_id": shards[rank], "num_shards": world}
        result = read_shard(args.loader, config, args.compute_ms, args.max_seconds, rank, shards[rank], progress)
        progress.set("gathering", result.samples)
        gathered: list | None = [None] * world if rank == 0 else None
        dist.gather_object(result.as_dict(), gathered, dst=0)
        if rank == 0:
            write_json(work_dir / RESULTS_FILE, gathered)
        progress.set("done")
    finally:
        dist.destroy_process_group()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workbench.bench.clients_rank", description=__doc__.split("\n")[0])
    parser.add_argument("--loader", required=True, help="registered loader name")
    parser.add_argument("--config", required=True, help="the loader's settings as JSON (dataset, batch_size, ...)")
    parser.add_argument("--work-dir", required=True, help="progress, errors and rank 0's ranks.json go here")
    parser.add_argument("--compute-ms", type=float, default=0.0, help="emulated compute per batch")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="longest a rank may read its shard")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="longest the ranks may take to start")
    parser.add_argument("--shards", default="", help="shard id of each rank, comma-separated (default: its rank)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    rank, world = rank_and_world()
    _die_with_launcher()
    _on_stop(stopped_file(work_dir, rank))
    _watchdog(args.start_timeout + args.max_seconds + GRACE_S, error_file(work_dir, rank), rank)
    progress = Progress(work_dir, rank)
    progress.set("starting")
    try:
        run_rank(args, rank, world, progress)
    except BaseException as exc:  # any failure becomes this rank's one-line error for the launcher
        message = first_line(exc) if isinstance(exc, WorkbenchError) else with_type(exc)
        error_file(work_dir, rank).write_text(f"rank {rank}: {message}\n")
        progress.set("failed")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
