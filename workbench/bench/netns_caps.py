"""Does a node's bandwidth cap hold? TCP bytes pushed through one capped namespace each way: measured rate / cap.

Why a benchmark and not a timed test: on a loaded 2-core box a rate is a measurement, not a fact to assert. The
target is a ratio within 20% of 1 (TCP payload against a cap that also counts headers: about 0.95 on an idle box).
It makes a namespace of its own (node 0 of `host`, 127.0.0.240 by default, with its own state folder), never a
stack's, and removes it afterwards. "send" is what the node sends (tbf on its veth), "receive" what it receives
(tbf on its ifb device). The side inside the namespace is this module run through `ip netns exec`.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.net import netns

DIRECTIONS = ("send", "receive")
CHUNK = 256 * 1024
WARMUP_S = 0.5  # the token bucket's first burst and TCP's slow start are left out of the rate
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CapRun:
    """One transfer through the capped node."""

    direction: str
    cap_mbps: float
    measured_mbps: float

    @property
    def ratio(self) -> float:
        return self.measured_mbps / self.cap_mbps


def measure(cap_mbps: float, seconds: float = 3.0, repeats: int = 5, host: str = "127.0.0.240",
            timeout_s: float = 10.0) -> list[CapRun]:
    """`repeats` transfers of `seconds` each way through a node capped at `cap_mbps`."""
    if cap_mbps <= 0 or seconds <= WARMUP_S or repeats < 1:
        raise WorkbenchError(f"netns caps: cap {cap_mbps:g} Mbit/s, {seconds:g} s, {repeats} repeats: the cap must "
                             f"be > 0, each transfer longer than {WARMUP_S} s, at least one repeat")
    with tempfile.TemporaryDirectory(prefix="netns-caps-") as state:
        settings = Settings(host=host, node_network="netns", node_bandwidth_mbps=cap_mbps, state_dir=Path(state),
                            timeout_s=timeout_s)
        reason = netns.unavailable_reason(settings)
        if reason:
            raise WorkbenchError(f"netns caps need network namespaces, which cannot be made here: {reason}")
        try:
            made = netns.ensure(settings, 1)
            if not made:
                raise WorkbenchError("netns caps: the namespace could not be made (see the notice above)")
            node = netns.node_of(made[0])
            runs = []
            for _ in range(repeats):
                runs.append(CapRun("send", cap_mbps, _node_sends(node, seconds, timeout_s) / 1e6))
                runs.append(CapRun("receive", cap_mbps, _node_receives(node, seconds, timeout_s) / 1e6))
            return runs
        finally:
            netns.teardown(settings)


def summarize(runs: list[CapRun]) -> list[dict[str, float | str | int]]:
    """Per direction and cap: median measured Mbit/s, median ratio and its spread (min, max)."""
    rows = []
    for direction in DIRECTIONS:
        for cap in sorted({r.cap_mbps for r in runs}):
            ratios = [r.ratio for r in runs if r.direction == direction and r.cap_mbps == cap]
            if ratios:
                rates = [r.measured_mbps for r in runs if r.direction == direction and r.cap_mbps == cap]
                rows.append({"direction": direction, "cap_mbps": cap, "repeats": len(ratios),
                             "median_mbps": statistics.median(rates), "median_ratio": statistics.median(ratios),
                             "min_ratio": min(ratios), "max_ratio": max(ratios)})
    return rows


def _node_sends(node: netns.Node, seconds: float, timeout_s: float) -> float:
    """The node sends to a receiver on the host side of the bridge: bits/s received."""
    with socket.create_server((netns.BRIDGE_ADDRESS, 0)) as server:
        server.settimeout(START_TIMEOUT_S)
        port = server.getsockname()[1]
        sender = _inside(node, "send", netns.BRIDGE_ADDRESS, str(port), str(seconds), str(timeout_s))
        try:
            try:
                connection, _ = server.accept()
            except TimeoutError:
                raise WorkbenchError(f"netns caps: the sender in {node.namespace} never connected: "
                                     f"{_errors(sender)}") from None
            with connection:
                connection.settimeout(timeout_s)
                rate = receive(connection)
            _finish(sender, timeout_s)
        finally:
            _stop(sender)
    return rate


def _node_receives(node: netns.Node, seconds: float, timeout_s: float) -> float:
    """A sender on the host sends to a receiver inside the node: bits/s it received."""
    receiver = _inside(node, "receive", node.address, str(timeout_s))
    try:
        assert receiver.stdout is not None
        ready = receiver.stdout.readline().strip()  # the port it listens on
        if not ready.isdigit():
            raise WorkbenchError(f"netns caps: the receiver in {node.namespace} did not start: {_errors(receiver)}")
        send(node.address, int(ready), seconds, timeout_s)
        out = _finish(receiver, timeout_s)
        return float(json.loads(out)["bps"])
    finally:
        _stop(receiver)


def receive(connection: socket.socket) -> float:
    """Read until the peer closes; bits per second after the first WARMUP_S."""
    start = time.monotonic()
    total, mark = 0, None
    while chunk := connection.recv(CHUNK):
        total += len(chunk)
        now = time.monotonic()
        if mark is None and now - start >= WARMUP_S:
            mark = (now, total)
    end = time.monotonic()
    if mark is None or end <= mark[0]:
        raise WorkbenchError(f"netns caps: the transfer ended within its {WARMUP_S} s warm-up ({total} bytes)")
    return (total - mark[1]) * 8 / (end - mark[0])


def send(address: str, port: int, seconds: float, timeout_s: float) -> None:
    """Send as fast as the path takes for `seconds`, then close."""
    payload = b"\0" * CHUNK
    with socket.create_connection((address, port), timeout=timeout_s) as connection:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            connection.sendall(payload)


def _inside(node: netns.Node, *args: str) -> subprocess.Popen[str]:
    command = [*netns.exec_prefix(node.namespace), sys.executable, "-m", __name__, *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str], timeout_s: float) -> str:
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise WorkbenchError(f"netns caps: the side inside the namespace did not finish within {timeout_s:g} s") \
            from None
    if process.returncode != 0:
        raise WorkbenchError(f"netns caps: the side inside the namespace failed: {first_line(err, 200)}")
    return out


def _errors(process: subprocess.Popen[str]) -> str:
    _stop(process)
    return first_line(process.stderr.read() if process.stderr else "", 200) or f"exit {process.returncode}"


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=START_TIMEOUT_S)


def _main(argv: list[str]) -> None:
    """The side inside the namespace: `send ADDRESS PORT SECONDS TIMEOUT` or `receive ADDRESS TIMEOUT`."""
    if argv[0] == "send":
        send(argv[1], int(argv[2]), float(argv[3]), float(argv[4]))
        return
    with socket.create_server((argv[1], 0)) as server:
        server.settimeout(float(argv[2]))
        print(server.getsockname()[1], flush=True)
        connection, _ = server.accept()
        with connection:
            connection.settimeout(float(argv[2]))
            result = {"bps": receive(connection)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
