"""Bounded concurrency, written once: requests in flight for readers, jobs in flight for writers.

`in_flight` keeps many requests outstanding: the one mechanism every remote loader uses to hide latency. The
depth is a number, or a `Window` that may change it while requests run: `AutoWindow` (what
``concurrency="auto"`` gives) measures completions per second and widens the window while the rate still
rises, so users need not guess the depth a network needs (Little's law: depth = rate x latency).

One job per module: `windows` (the depth a config asks for), `auto_window` (the self-sizing window, derived in
auto_window.md), `in_flight` (the executors), `threads` (pools and event loops a process starts), `pickling`.
"""

from workbench.concurrency.auto_window import AUTO_CAP, AUTO_START, RECHECK_ROUND_TRIPS, AutoTuning, AutoWindow, Phase
from workbench.concurrency.in_flight import Collector, InFlight, finish, in_flight, in_flight_collected, map_in_flight
from workbench.concurrency.pickling import PicklesWithoutLocks
from workbench.concurrency.threads import EventLoopThread, LazyPool
from workbench.concurrency.windows import (
    AUTO,
    READ_BUDGET,
    REFERENCE_DEPTH,
    Concurrency,
    FixedWindow,
    HasWindow,
    RoundTripWindow,
    Window,
    budget_depth,
    fixed_depth,
    make_window,
    parse_concurrency,
    pool_size,
)

__all__ = [
    "AUTO", "AUTO_CAP", "AUTO_START", "READ_BUDGET", "RECHECK_ROUND_TRIPS", "REFERENCE_DEPTH", "AutoTuning",
    "AutoWindow", "Collector", "Concurrency", "EventLoopThread", "FixedWindow", "HasWindow", "InFlight", "LazyPool",
    "Phase", "PicklesWithoutLocks", "RoundTripWindow", "Window", "budget_depth", "finish", "fixed_depth",
    "in_flight", "in_flight_collected", "make_window", "map_in_flight", "parse_concurrency", "pool_size",
]
