"""The state a loader saves to resume mid-epoch (torchdata's Stateful convention), as plain values.

A reader's order is fixed by (seed, epoch, shard, worker) when ``ordered``: its state is the epoch, how many
items of that order it delivered, whether the epoch ended, which reader it is and the config fields that fix
its order; out of order, the ids delivered instead. `check_state` turns a saved state back into a `Resume`
for one reader, or one WorkbenchError line saying why it does not fit.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from workbench.errors import WorkbenchError
from workbench.loaders.order import effective_shard

LoaderConfig = BaseModel  # a workbench.loaders.base.LoaderConfig (named here without importing the loaders' base)

STATE_VERSION = 1
# Config fields that fix a reader's order: a state resumes only a loader that has the same values.
ORDER_FIELDS = ("dataset", "split", "seed", "shuffle", "ordered", "shuffle_buffer", "mode")


@dataclass(frozen=True)
class Resume:
    """A loaded state: in `epoch`, the first `position` items of the reader's order were delivered (ordered), or
    the items of `delivered` ids (out of order); `done`: the epoch had ended."""

    epoch: int
    position: int
    done: bool
    delivered: tuple[str, ...] | None

    @functools.cached_property
    def skip(self) -> frozenset[str]:
        return frozenset(self.delivered or ())


def make_state(loader: str, config: LoaderConfig, worker_id: int, num_workers: int, epoch: int, position: int = 0,
               done: bool = False, delivered: Any = None) -> dict[str, Any]:
    """A state dict (also for readers not built yet: the start of `epoch`)."""
    state: dict[str, Any] = {
        "version": STATE_VERSION, "loader": loader, "epoch": epoch, "position": position, "done": done,
        "reader": list(effective_shard(config.shard_id, config.num_shards, worker_id, num_workers)),
        "order": {f: getattr(config, f) for f in ORDER_FIELDS if hasattr(config, f)},
    }
    if not config.ordered:
        state["delivered"] = list(delivered or ())
    return state


def check_state(loader: str, state: Mapping[str, Any], config: LoaderConfig, worker_id: int,
                num_workers: int) -> Resume:
    """`state` as a Resume for this reader, or one WorkbenchError line saying why it cannot resume it."""
    what = f"loader '{loader}'"
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        found = state.get("version") if isinstance(state, Mapping) else type(state).__name__
        raise WorkbenchError(f"{what}: not a loader state of version {STATE_VERSION} (got {found!r}): pass what "
                             "state_dict() returned")
    if state.get("loader") != loader:
        raise WorkbenchError(f"{what} cannot resume a state of loader '{state.get('loader')}'")
    reader = list(effective_shard(config.shard_id, config.num_shards, worker_id, num_workers))
    if list(state.get("reader") or []) != reader:
        saved = state.get("reader") or ["?", "?"]
        raise WorkbenchError(
            f"{what}: the state is reader {saved[0]} of {saved[1]} (ranks x DataLoader workers), this is reader "
            f"{reader[0]} of {reader[1]}: resume with the same ranks, shard_id and DataLoader workers")
    order = {f: getattr(config, f) for f in ORDER_FIELDS if hasattr(config, f)}
    saved_order = state.get("order") or {}
    for name, value in order.items():
        if saved_order.get(name) != value:
            raise WorkbenchError(f"{what}: the state was saved with {name}={saved_order.get(name)!r}, this loader "
                                 f"has {name}={value!r}: resume with the settings the state was saved with")
    try:
        epoch, position, done = int(state["epoch"]), int(state["position"]), bool(state["done"])
        delivered = None if config.ordered else tuple(str(k) for k in state["delivered"])
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkbenchError(f"{what}: a damaged state ({type(exc).__name__}: {exc}): pass what state_dict() "
                             "returned") from None
    if epoch < 0 or position < 0:
        raise WorkbenchError(f"{what}: a damaged state (epoch {epoch}, position {position})")
    return Resume(epoch, position, done, delivered)
