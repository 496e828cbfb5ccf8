"""Launching the ranks of `bench clients`: the commands, the plans refused, the ranks' environment, and how
the watcher reads the ranks' files (errors, deaths, stalls, ranks that never start). No servers, no torch."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from workbench.bench.clients_launch import (
    MPI_HINT,
    RANK_MODULE,
    LaunchPlan,
    RankWatch,
    launch,
    launcher_command,
    settings_env,
    stop,
)
from workbench.bench.clients_rank import error_file, progress_file, rank_and_world, stopped_file
from workbench.config import Settings
from workbench.errors import WorkbenchError

ARGS = ["--loader", "fs"]


def test_torchrun_on_one_host_is_standalone_with_timeouts():
    command = launcher_command(LaunchPlan("torchrun", 4, start_timeout_s=90), ARGS, [], python="py")
    assert command[:4] == ["py", "-m", "torch.distributed.run", "--standalone"]
    assert command[command.index("--nproc-per-node") + 1] == "4"
    assert command[command.index("--max-restarts") + 1] == "0"
    assert "join_timeout=90" in command[command.index("--rdzv-conf") + 1]
    assert command[-4:] == ["-m", RANK_MODULE, *ARGS]


def test_torchrun_on_several_hosts_meets_at_the_rendezvous():
    plan = LaunchPlan("torchrun", 4, nnodes=2, rdzv_endpoint="node1:29400")
    command = launcher_command(plan, ARGS, [], python="py")
    assert "--standalone" not in command
    assert command[command.index("--nnodes") + 1] == "2"
    assert command[command.index("--nproc-per-node") + 1] == "2"
    assert command[command.index("--rdzv-endpoint") + 1] == "node1:29400"
    assert not plan.single_host and plan.local_ranks == []


def test_mpirun_forwards_variables_by_name_only():
    plan = LaunchPlan("mpirun", 3, hosts="a:2,b:1")
    command = launcher_command(plan, ARGS, ["WORKBENCH_S3_SECRET_KEY", "MASTER_PORT"], python="py",
                               mpirun="/usr/bin/mpirun")
    assert command[:3] == ["/usr/bin/mpirun", "-np", "3"]
    assert command[command.index("-H") + 1] == "a:2,b:1"
    assert command[command.index("MASTER_PORT") - 1] == "-x"
    assert "-x" in command and not any("=" in part for part in command[:command.index("py")])
    assert command[-4:] == ["py", "-m", RANK_MODULE, *ARGS][-4:]


def test_mpirun_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(WorkbenchError) as err:
        launcher_command(LaunchPlan("mpirun", 2), ARGS, [])
    assert str(err.value) == MPI_HINT and "apt-get install -y openmpi-bin" in MPI_HINT


@pytest.mark.parametrize(("plan", "message"), [
    ({"launcher": "slurm", "ranks": 2}, "unknown launcher 'slurm'"),
    ({"launcher": "torchrun", "ranks": 0}, "at least 1 rank"),
    ({"launcher": "torchrun", "ranks": 3, "nnodes": 2, "rdzv_endpoint": "h:1"}, "does not split evenly"),
    ({"launcher": "torchrun", "ranks": 4, "nnodes": 2}, "needs --rdzv-endpoint"),
    ({"launcher": "mpirun", "ranks": 2, "rdzv_endpoint": "h:1"}, "torchrun's"),
    ({"launcher": "torchrun", "ranks": 2, "hosts": "a:1,b:1"}, "mpirun's"),
])
def test_bad_plans_are_refused_before_anything_starts(plan, message):
    with pytest.raises(WorkbenchError, match=message):
        LaunchPlan(**plan)


def test_settings_reach_the_ranks_as_variables(tmp_path, monkeypatch):
    settings = Settings(_env_file=None, state_dir=tmp_path, s3_secret_key="s3cr3t", cassandra_nodes=3,
                        cassandra_replication_factor=3, s3_endpoints=["http://a:9000"], dev_mode=True)
    env = settings_env(settings)
    assert env["WORKBENCH_S3_SECRET_KEY"] == "s3cr3t"
    assert env["WORKBENCH_STATE_DIR"] == str(tmp_path)
    assert env["WORKBENCH_DEV_MODE"] == "true"
    assert json.loads(env["WORKBENCH_S3_ENDPOINTS"]) == ["http://a:9000"]
    for name, value in env.items():  # what a rank sees: these variables and nothing else
        monkeypatch.setenv(name, value)
    again = Settings(_env_file=None)
    assert again.model_dump() == settings.model_dump()
    assert again.s3_secret_key.get_secret_value() == "s3cr3t"


@pytest.mark.parametrize(("environ", "expected"), [
    ({"RANK": "1", "WORLD_SIZE": "4"}, (1, 4)),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}, (2, 3)),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, (0, 2)),
])
def test_rank_and_world_from_either_launcher(environ, expected):
    assert rank_and_world(environ) == expected


def test_no_launcher_no_rank():
    with pytest.raises(WorkbenchError, match="start this module with torchrun or mpirun"):
        rank_and_world({})


# ------------------------------------------------------------------------------------- the watcher

def progress(work_dir, rank: int, state: str, samples: int = 0, pid: int | None = None) -> None:
    progress_file(work_dir, rank).write_text(json.dumps({
        "rank": rank, "pid": pid or os.getpid(), "host": socket.gethostname(), "state": state, "samples": samples,
        "at": time.time()}))


def watch(tmp_path, ranks=2, max_seconds=100.0, stall_s=10.0, start_timeout_s=30.0) -> RankWatch:
    return RankWatch(tmp_path, LaunchPlan("torchrun", ranks, start_timeout_s=start_timeout_s), max_seconds, stall_s)


def test_all_well_no_verdict(tmp_path):
    w = watch(tmp_path)
    progress(tmp_path, 0, "reading", 5)
    progress(tmp_path, 1, "done", 7)
    assert w.verdict(w.started + 1) is None
    assert w.samples == 12


def test_the_first_error_is_the_cause(tmp_path):
    w = watch(tmp_path)
    error_file(tmp_path, 1).write_text("rank 1: dataset 'x' was never ingested\n")
    time.sleep(0.02)
    error_file(tmp_path, 0).write_text("rank 0: RuntimeError: connection closed by peer\n")
    assert w.verdict(w.started) == "rank 1: dataset 'x' was never ingested"


def test_a_dead_rank_is_named(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    w = watch(tmp_path)
    progress(tmp_path, 0, "reading", 3)
    progress(tmp_path, 1, "reading", 4, pid=dead.pid)
    verdict = w.verdict(w.started + 1)
    assert verdict.startswith(f"rank 1 (pid {dead.pid}) died without an error after 4 samples")


def test_the_rank_that_died_first_is_named_not_the_ones_stopped_after_it(tmp_path):
    gone = []
    for _ in range(2):
        process = subprocess.Popen([sys.executable, "-c", "pass"])
        process.wait()
        gone.append(process.pid)
    w = watch(tmp_path)
    progress(tmp_path, 0, "reading", 3, pid=gone[0])
    stopped_file(tmp_path, 0).write_text("stopped by the launcher\n")  # torchrun's SIGTERM after rank 1 died
    error_file(tmp_path, 0).write_text("")  # (an empty error file is no error)
    progress(tmp_path, 1, "gathering", 4, pid=gone[1])
    assert w.verdict(w.started + 1).startswith("rank 1 (pid")


def test_a_real_error_beats_the_ranks_stopped_because_of_it(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    w = watch(tmp_path)
    progress(tmp_path, 0, "reading", 3, pid=gone.pid)
    stopped_file(tmp_path, 0).write_text("stopped by the launcher\n")
    progress(tmp_path, 1, "failed", 1)
    error_file(tmp_path, 1).write_text("rank 1: bad things\n")
    assert w.verdict(w.started + 1) == "rank 1: bad things"
    error_file(tmp_path, 1).unlink()
    assert w.verdict(w.started + 1) == "rank 0 stopped by torchrun (no rank reported why)"


def test_a_rank_that_never_starts_is_named(tmp_path):
    w = watch(tmp_path, start_timeout_s=5)
    progress(tmp_path, 0, "starting")
    assert w.verdict(w.started + 1) is None
    assert w.verdict(w.started + 6).startswith("rank 1 did not start within 5 s")


def test_ranks_stuck_before_the_barrier_are_named(tmp_path):
    w = watch(tmp_path, start_timeout_s=5)
    progress(tmp_path, 0, "starting")
    progress(tmp_path, 1, "starting")
    assert w.verdict(w.started + 6).startswith("rank 0, 1 did not start")


def test_a_rank_reading_nothing_is_stuck(tmp_path):
    w = watch(tmp_path, stall_s=10)
    progress(tmp_path, 0, "reading", 3)
    progress(tmp_path, 1, "done", 4)
    t = w.started + 1
    assert w.verdict(t) is None
    assert w.verdict(t + 5) is None
    assert w.verdict(t + 11) == "rank 0 read nothing for 10 s (stuck after 3 samples)"


def test_a_rank_past_max_seconds_is_named(tmp_path):
    w = watch(tmp_path, max_seconds=10, stall_s=1e9)
    progress(tmp_path, 0, "reading", 3)
    progress(tmp_path, 1, "gathering", 4)
    t = w.started + 1
    assert w.verdict(t) is None
    assert w.verdict(t + 10 + 61).startswith("rank 0 still running 10 s after the start")


def test_launch_stops_everything_and_names_the_failure(tmp_path):
    """A stand-in launcher whose 'rank' writes an error and then hangs: launch stops it, nothing survives."""
    script = (f"import json, os, socket, time, pathlib; d = pathlib.Path({str(tmp_path)!r}); "
              "(d / 'rank-0.progress.json').write_text(json.dumps({'rank': 0, 'pid': os.getpid(), "
              "'host': socket.gethostname(), 'state': 'reading', 'samples': 1})); "
              "(d / 'rank-0.error').write_text('rank 0: broken on purpose'); time.sleep(600)")
    with pytest.raises(WorkbenchError, match="rank 0: broken on purpose"):
        launch([sys.executable, "-c", script], dict(os.environ), LaunchPlan("torchrun", 1), tmp_path, 60, 60)
    pid = json.loads(progress_file(tmp_path, 0).read_text())["pid"]
    assert not os.path.exists(f"/proc/{pid}")  # stopped and reaped


def test_a_launcher_that_exits_early_is_reported(tmp_path):
    with pytest.raises(WorkbenchError, match=r"torchrun exited with code 3 before the ranks finished: bad flag"):
        launch([sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"], dict(os.environ),
               LaunchPlan("torchrun", 1), tmp_path, 60, 60)


def test_stop_kills_rank_pids_outside_the_launchers_group():
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    stop(launcher, [rank.pid])
    assert launcher.poll() == -signal.SIGTERM  # its group got SIGTERM, and it was gone within the grace period
    assert rank.wait(5) == -signal.SIGKILL  # the rank in a session of its own was killed by pid
