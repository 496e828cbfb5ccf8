"""Hosts of their own: one network namespace per node of the local stack, joined by a bridge, with a bandwidth cap.

Why: on loopback every node shares the host's one unlimited interface. In a namespace a node has its own
address and its own link, so a per-host cap holds as on a real host: `tc` tbf on the node's side of its veth
shapes what it sends, an ifb device (fed by an ingress filter) shapes what it receives. Round-trip time stays
with toxiproxy (the kernel has no netem): its per-node proxies listen on the host side, at the nodes'
loopback addresses (`Settings.proxy_host`), and forward over the bridge.

Address plan, private to the namespaces this module makes (`workbench.config` holds the node side): node
127.0.0.N runs in namespace `workbench-N` at 10.77.1.N/16 behind the veth `wb-vethN`; the bridge `wb-br` holds
10.77.0.1/16 on the host side, so clients and toxiproxy on the host reach every node. Namespaces get no default
route: a node reaches the other nodes and the host side of the bridge, nothing else.

Every namespace is recorded under `<state_dir>/netns/` before it is made, so `teardown` removes exactly what this
stack made, also after an `ensure` that failed half way; the bridge goes with the last veth on it. Where
namespaces cannot be made (not root, no iproute2, `ip netns add` fails), `ensure` prints one notice and nodes
stay on their loopback addresses (`Settings.node_host` follows the namespaces that exist).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workbench.config import NETNS_DIR, NETNS_NODES, Settings
from workbench.errors import WorkbenchError, first_line

BRIDGE = "wb-br"
BRIDGE_ADDRESS = "10.77.0.1"
NETWORK = ipaddress.ip_network("10.77.0.0/16")
NODE_LINK = "eth0"  # the node's end of its veth, inside its namespace
IFB = "wb-ifb"  # inside each namespace: what the node receives, redirected here to be shaped
COMMAND_TIMEOUT_S = 20.0
MIN_BURST_BYTES = 64 * 1024  # a GSO packet on a veth is up to 64 KiB: a smaller bucket splits every one
BURST_S = 0.01  # above that, the bucket holds 10 ms of the rate
LATENCY = "50ms"  # the longest a packet waits in the shaper's queue


@dataclass(frozen=True)
class Node:
    """One node's network: its namespace, its address inside it and its veth's host end."""

    namespace: str
    address: str
    veth: str


def plan(settings: Settings, hosts: int) -> list[Node]:
    """The namespaces of nodes 0..hosts-1 of this stack (they need not exist)."""
    return [node_of(settings.netns_name(k)) for k in range(hosts)]


def node_of(namespace: str) -> Node:
    """A node's network from its namespace's name (`workbench-N`: 10.77.1.N behind `wb-vethN`)."""
    number = namespace.rsplit("-", 1)[-1]
    return Node(namespace, NETNS_NODES + number, f"wb-veth{number}")


def unavailable_reason(settings: Settings) -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (install iproute2)"
    if not settings.host.startswith("127."):
        return f"WORKBENCH_HOST={settings.host} is not a loopback address (namespaces are named after node k's " \
               "127.0.0.x address)"
    clash = foreign_addresses()
    if clash:
        return f"{', '.join(clash)} already use the private range {NETWORK}"
    return None


def foreign_addresses() -> list[str]:
    """Interfaces of the host, other than ours, with an address in NETWORK (we never route over another's)."""
    rows = json.loads(_run(["ip", "-j", "-4", "addr", "show"]) or "[]")
    return [f"{row['ifname']} ({info['local']})" for row in rows if row["ifname"] != BRIDGE
            for info in row.get("addr_info", []) if ipaddress.ip_address(info["local"]) in NETWORK]


def shaping_commands(mbps: float) -> list[list[str]]:
    """tc arguments (after `tc -n <namespace>`) that cap the node at `mbps` each way: tbf on its veth end for
    what it sends; an ingress filter redirecting what it receives to the ifb device, shaped by a second tbf."""
    rate = round(mbps * 1e6)
    burst = max(MIN_BURST_BYTES, round(rate / 8 * BURST_S))
    tbf = ["root", "tbf", "rate", f"{rate}bit", "burst", str(burst), "latency", LATENCY]
    return [
        ["qdisc", "replace", "dev", NODE_LINK, *tbf],
        ["qdisc", "add", "dev", NODE_LINK, "handle", "ffff:", "ingress"],
        ["filter", "add", "dev", NODE_LINK, "parent", "ffff:", "protocol", "all", "prio", "1", "u32",
         "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", IFB],
        ["qdisc", "replace", "dev", IFB, *tbf],
    ]


def ensure(settings: Settings, hosts: int) -> list[str]:
    """Make (idempotently) the namespaces of nodes 0..hosts-1, the bridge and each node's cap; the namespaces.

    With node_network=loopback, or where namespaces cannot be made (one notice on stderr), nothing is made and
    the nodes stay on loopback addresses. A cap that cannot be applied is an error (measuring uncapped would
    be wrong); `teardown` removes what was made."""
    if settings.node_network != "netns" or hosts < 1:
        return []
    reason = unavailable_reason(settings)
    if reason:
        return _fall_back(reason)
    nodes = plan(settings, hosts)
    with _locked():
        made = []
        try:
            _ensure_bridge()
            for node in nodes:
                if not (NETNS_DIR / node.namespace).exists():
                    made.append(node)
                _ensure_node(settings, node)
        except WorkbenchError as exc:
            _remove(settings, made)
            return _fall_back(str(exc))
        for node in nodes:
            _shape(settings, node)
    return [node.namespace for node in nodes]


def teardown(settings: Settings) -> list[str]:
    """Remove every namespace this stack recorded (its veth and ifb go with it), and the bridge once no veth is
    left on it; the namespaces removed. Processes still inside must be stopped first (`stack down` does)."""
    records = _records(settings)
    if not records.is_dir():
        return []
    with _locked():
        removed = _remove(settings, [node_of(p.name) for p in sorted(records.iterdir())])
        with contextlib.suppress(OSError):
            records.rmdir()
    return removed


def namespaces(settings: Settings) -> list[str]:
    """The namespaces this stack made that exist now."""
    records = _records(settings)
    names = sorted(p.name for p in records.iterdir()) if records.is_dir() else []
    return [name for name in names if (NETNS_DIR / name).exists()]


def shaping(namespace: str) -> dict[str, int]:
    """The tbf rate (bit/s) on each link of a namespace: {'eth0': ..., 'wb-ifb': ...}; empty without a cap."""
    rows = json.loads(_run(["tc", "-n", namespace, "-j", "qdisc", "show"]) or "[]")
    return {row["dev"]: int(row["options"]["rate"]) * 8 for row in rows if row.get("kind") == "tbf"}


def set_link(namespace: str, up: bool) -> str:
    """Cut (`up` False) or mend a node's link: its veth's host end down or up. Down, the node reaches neither the
    bridge nor any other node, and nothing on the host reaches it (a partition); its namespace, addresses and
    cap stay as they were. Returns the veth."""
    veth = node_of(namespace).veth
    if not _is_veth(veth):
        raise WorkbenchError(f"namespace {namespace} has no veth {veth} on this host: is the stack up with "
                             "node_network=netns?")
    _run(["ip", "link", "set", veth, "up" if up else "down"])
    return veth


def exec_prefix(namespace: str | None) -> list[str]:
    """The command prefix that runs a program inside `namespace` (none for the host)."""
    return ["ip", "netns", "exec", namespace] if namespace else []


def _fall_back(reason: str) -> list[str]:
    print(f"notice: node_network=netns: {first_line(reason, 200)}; nodes use loopback addresses 127.0.0.x",
          file=sys.stderr, flush=True)
    return []


def _records(settings: Settings) -> Path:
    return settings.state_dir / "netns"


def _ensure_bridge() -> None:
    if not _link_exists(BRIDGE):
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "addr", "replace", f"{BRIDGE_ADDRESS}/{NETWORK.prefixlen}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])


def _ensure_node(settings: Settings, node: Node) -> None:
    records = _records(settings)
    records.mkdir(parents=True, exist_ok=True)
    (records / node.namespace).touch()  # recorded before it exists: teardown finds it whatever fails next
    if not (NETNS_DIR / node.namespace).exists():
        _run(["ip", "netns", "add", node.namespace])
    if not _link_exists(node.veth):
        _run(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", NODE_LINK, "netns", node.namespace])
    _run(["ip", "link", "set", node.veth, "master", BRIDGE, "up"])
    inside = ["ip", "-n", node.namespace]
    _run([*inside, "addr", "replace", f"{node.address}/{NETWORK.prefixlen}", "dev", NODE_LINK])
    _run([*inside, "link", "set", NODE_LINK, "up"])
    _run([*inside, "link", "set", "lo", "up"])


def _shape(settings: Settings, node: Node) -> None:
    """Replace the node's cap by settings.node_bandwidth_mbps (0: remove it)."""
    tc = ["tc", "-n", node.namespace]
    _run([*tc, "qdisc", "del", "dev", NODE_LINK, "root"], check=False)
    _run([*tc, "qdisc", "del", "dev", NODE_LINK, "ingress"], check=False)  # its filter goes with it
    _run(["ip", "-n", node.namespace, "link", "del", IFB], check=False)
    if settings.node_bandwidth_mbps <= 0:
        return
    _run(["ip", "-n", node.namespace, "link", "add", IFB, "type", "ifb"])
    _run(["ip", "-n", node.namespace, "link", "set", IFB, "up"])
    try:
        for args in shaping_commands(settings.node_bandwidth_mbps):
            _run([*tc, *args])
    except WorkbenchError as exc:
        raise WorkbenchError(f"WORKBENCH_NODE_BANDWIDTH_MBPS={settings.node_bandwidth_mbps:g}: the cap on "
                             f"{node.namespace} failed ({exc}); `workbench stack down` removes the namespaces, "
                             "0 runs without a cap") from None


def _remove(settings: Settings, nodes: list[Node]) -> list[str]:
    removed = []
    for node in nodes:
        if _is_veth(node.veth):  # its peer inside goes with it, even while a process keeps the namespace
            _run(["ip", "link", "del", node.veth], check=False)
        if (NETNS_DIR / node.namespace).exists():
            _run(["ip", "netns", "del", node.namespace], check=False)
            removed.append(node.namespace)
        (_records(settings) / node.namespace).unlink(missing_ok=True)
    bridge_ports = Path("/sys/class/net") / BRIDGE / "brif"
    if bridge_ports.is_dir() and not any(bridge_ports.iterdir()):
        _run(["ip", "link", "del", BRIDGE], check=False)
    return removed


def _link_exists(name: str) -> bool:
    """An interface of the host's own namespace (where this process runs)."""
    return (Path("/sys/class/net") / name).exists()


def _is_veth(name: str) -> bool:
    """Whether the host has a veth of that name (a link of another kind with our name is not ours to remove)."""
    if not _link_exists(name):
        return False
    rows = json.loads(_run(["ip", "-j", "-d", "link", "show", "dev", name], check=False) or "[]")
    return any(row.get("linkinfo", {}).get("info_kind") == "veth" for row in rows)


def _run(command: list[str], check: bool = True) -> str:
    """Run an iproute2 command with a timeout; a failure is one line naming the command and its error."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        if check:
            raise WorkbenchError(f"`{' '.join(command)}` failed: {first_line(exc, 200)}") from None
        return ""
    if done.returncode != 0 and check:
        raise WorkbenchError(f"`{' '.join(command)}` failed: {first_line(done.stderr or done.stdout, 200)}")
    return done.stdout


@contextmanager
def _locked() -> Iterator[None]:
    """One stack at a time changes the namespaces and the shared bridge. The lock is on /run, the folder above
    the namespaces' (`ip netns add` locks that one itself), so it leaves no file behind."""
    fd = os.open(NETNS_DIR.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
