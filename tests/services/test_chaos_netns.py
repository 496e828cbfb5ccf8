"""The chaos soak's partition on hosts of their own (root only): a MinIO node's veth goes down, a real partition.

2 MinIO processes x 2 drives (one erasure set of 4 drives, EC:2: node 0's two drives keep reads), each in its
network namespace, toxiproxy on the host; the cluster's own loopback numbers (127.0.0.231, .232: namespaces
`workbench-231`, `-232`), ports no other MinIO uses, and a fresh state folder. On loopback nodes a partition only
disables the node's proxies, which MinIO's clients (node 0 only) never use: namespaces are where it cuts the node
from its peers. The soak's one epoch reads every sample once while node 2 is cut off; the link is up again after.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

from workbench.backends import make_backend
from workbench.chaos import format_report, run_chaos
from workbench.config import NETNS_DIR, Settings
from workbench.data import SyntheticSource
from workbench.ingest import ingest
from workbench.net import netns
from workbench.stack import manager
from workbench.stack.minio import cluster_health

pytestmark = [
    pytest.mark.services, pytest.mark.cluster, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="network namespaces need root and ip"),
]
HOST = "127.0.0.231"
SERVICES = ["toxiproxy", "minio"]


def test_a_partition_cuts_a_minio_node_s_veth_and_the_epoch_reads_every_sample_once(tmp_path):
    settings = Settings(host=HOST, node_network="netns", state_dir=tmp_path / "state", timeout_s=10.0, s3_nodes=2,
                        s3_drives_per_node=2, s3_port=29600, s3_console_port=29601, proxy_s3_port=29690,
                        toxiproxy_port=29674, tls=False)
    veth = netns.node_of("workbench-232").veth
    operstate = Path("/sys/class/net") / veth / "operstate"
    states: set[str] = set()  # the host end of node 2's veth, as seen during the soak
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            states.add(operstate.read_text().strip() if operstate.exists() else "gone")

    try:
        rows = manager.up(settings, SERVICES)
        assert all(r.healthy for r in rows), [f"{r.service}: {r.detail}" for r in rows if not r.healthy]
        assert [r.address for r in rows] == ["127.0.0.231:29674", "10.77.1.231:29600", "10.77.1.232:29600"]
        name = f"netns_{uuid.uuid4().hex[:8]}"
        source = SyntheticSource(80, mean_kb=8, seed=37)
        ingest(source, make_backend("s3-objects", settings, name), progress=False)
        expected = Counter(str(s.id) for s in source)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        lines: list[str] = []
        try:
            report = run_chaos(settings, ["s3-objects"], name, duration_s=1.0, seed=2, faults=["partition"],
                               pace_s=0.05, node_window_s=4.0, log=lines.append)
        finally:
            done.set()
            watcher.join(30)
        print("\n" + "\n".join(lines + format_report(report)))
        [fault] = report.faults
        assert fault.target == "minio-2"
        assert fault.how == f"netns: veth {veth} of workbench-232 down (cut from the clients and its peers)"
        assert fault.after_samples < sum(expected.values()), "the epoch ended before the partition"
        assert fault.error == "" and (fault.lost, fault.duplicated) == (0, 0) and fault.survived, fault
        assert fault.window_s >= 4.0 and fault.recovery_s >= 0 and report.services_healthy
        assert "down" in states, states  # the link really went down during the soak
        assert operstate.read_text().strip() == "up"
        assert cluster_health(settings).state == "healthy"
    finally:
        manager.down(settings, SERVICES)
        manager.down(settings)
    assert not [n for n in ("workbench-231", "workbench-232") if (NETNS_DIR / n).exists()]
