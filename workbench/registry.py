"""What both registries (backends, loaders) do alike: resolve a name lazily, register one, validate options.

An entry is an import path ``"module:Class"`` (imported on first use, so `workbench --help` never imports
every client library) or the class itself (one defined at run time, e.g. in a test or a user's script).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from workbench.errors import WorkbenchError

Entry = str | type
M = TypeVar("M", bound=BaseModel)


class Registry(dict[str, Entry]):
    """Name -> entry of one kind ("backend", "loader"): resolved lazily, extended by `register`."""

    def __init__(self, kind: str, entries: dict[str, Entry]) -> None:
        super().__init__(entries)
        self.kind = kind

    def resolve(self, name: str) -> type:
        """The class registered as `name`, or a WorkbenchError listing the registered names."""
        if name not in self:
            raise WorkbenchError(f"unknown {self.kind} '{name}': choose from {', '.join(sorted(self))}")
        target = self[name]
        if isinstance(target, type):
            return target
        module, attr = target.split(":")
        return getattr(import_module(module), attr)

    def check_names(self, names: list[str]) -> list[str]:
        """`names` when each is registered; else a ValueError (for a pydantic validator) naming the unknown ones
        and listing the registered."""
        unknown = [name for name in names if name not in self]
        if unknown:
            raise ValueError(f"unknown {self.kind} {', '.join(unknown)} (valid: {', '.join(self)})")
        return names

    def register(self, name: str, target: Entry) -> None:
        """Add `name` (``"module:Class"`` or the class); another target under a taken name is an error."""
        if name in self and self[name] is not target and self[name] != target:
            raise WorkbenchError(f"{self.kind} '{name}' is already registered ({self[name]}): choose another name")
        self[name] = target


def validated(model: type[M], values: dict[str, Any], what: str, listing: str) -> M:
    """`model(**values)`, or one line: ``invalid <what> '<field>': <why> (<listing>: <every valid field>)``."""
    try:
        return model(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "config"
        raise WorkbenchError(
            f"invalid {what} '{field}': {first['msg']} ({listing}: {', '.join(model.model_fields)})"
        ) from exc
