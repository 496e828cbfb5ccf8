"""`workbench netns`: the nodes' network namespaces (`workbench.net.netns`) and whether their caps hold
(`workbench.bench.netns_caps`). Added to the main app with `app.add_typer(netns_app, name="netns")`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from workbench.bench.netns_caps import measure, summarize
from workbench.config import get_settings
from workbench.net import netns

app = typer.Typer(no_args_is_help=True, help="Hosts of their own: one network namespace per node, with a "
                                             "bandwidth cap (WORKBENCH_NODE_NETWORK=netns).")
console = Console()


@app.command("show")
def show_command() -> None:
    """The namespaces this stack made: each node's address and its cap, as tc reports it."""
    settings = get_settings()
    names = netns.namespaces(settings)
    if not names:
        console.print(f"no namespaces (WORKBENCH_NODE_NETWORK={settings.node_network}): nodes are on loopback "
                      "addresses", highlight=False)
        return
    table = Table("namespace", "address", "sends (Mbit/s)", "receives (Mbit/s)")
    for name in names:
        rates = netns.shaping(name)
        table.add_row(name, netns.node_of(name).address, *(f"{rates[d] / 1e6:g}" if d in rates else "no cap"
                                                            for d in (netns.NODE_LINK, netns.IFB)))
    console.print(table)


@app.command("caps")
def caps_command(
    mbps: Annotated[list[float], typer.Option(min=0.1, help="caps to measure, Mbit/s (repeat the option)")] = [100.0],  # noqa: B006 - typer reads the default
    seconds: Annotated[float, typer.Option(min=1.0, help="length of each transfer")] = 3.0,
    repeats: Annotated[int, typer.Option(min=1, help="transfers per direction and cap")] = 5,
    host: Annotated[str, typer.Option(help="loopback address naming the benchmark's own namespace")] = "127.0.0.240",
) -> None:
    """Push TCP bytes through a namespace of its own, capped at each rate, both ways: measured rate / cap
    (target within 20% of 1; TCP payload against a cap that counts headers reads about 0.95)."""
    timeout_s = get_settings().timeout_s
    runs = [run for cap in mbps for run in measure(cap, seconds, repeats, host, timeout_s)]
    table = Table("direction", "cap Mbit/s", "repeats", "median Mbit/s", "median ratio", "spread (min-max)",
                  title="node bandwidth cap: measured / cap")
    for row in summarize(runs):
        table.add_row(str(row["direction"]), f"{row['cap_mbps']:g}", str(row["repeats"]), f"{row['median_mbps']:.1f}",
                      f"{row['median_ratio']:.3f}", f"{row['min_ratio']:.3f}-{row['max_ratio']:.3f}")
    console.print(table)
