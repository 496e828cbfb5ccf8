"""Objects that pickle into DataLoader workers (spawn) without their locks and their process-bound state."""

from __future__ import annotations

import copy
import threading
from typing import Any, ClassVar


class PicklesWithoutLocks:
    """Pickles (DataLoader workers, spawn) without its locks and its process-bound state; a copy gets new locks.

    `locks`: attributes holding a threading.Lock; `process_state`: attribute -> the value a copy starts with
    (clients, pools, datasets that each process builds for itself).
    """

    locks: ClassVar[tuple[str, ...]] = ("_lock",)
    process_state: ClassVar[dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in self.locks}
        state.update({name: copy.copy(value) for name, value in self.process_state.items()})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in self.locks:
            setattr(self, name, threading.Lock())


