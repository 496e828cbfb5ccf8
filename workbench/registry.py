"""What both registries (backends, loaders) do alike: resolve a name lazily, register one, validate options.

An entry is an import path ``"module:Class"`` (imported on first use, so `workbench --help` never imports
every client library) or the class itself (one defined at run time, e.g. in a test or a user's script).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from importlib import import_module
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from workbench.errors import WorkbenchError

T = TypeVar("T")
Entry = str | type
M = TypeVar("M", bound=BaseModel)


def resolve(entries: MutableMapping[str, Entry], name: str, kind: str) -> type:
    """The class registered as `name`, or a WorkbenchError listing the registered names."""
    if name not in entries:
        raise WorkbenchError(f"unknown {kind} '{name}': choose from {', '.join(sorted(entries))}")
    target = entries[name]
    if isinstance(target, type):
        return target
    module, attr = target.split(":")
    return getattr(import_module(module), attr)


def register(entries: MutableMapping[str, Entry], name: str, target: Entry, kind: str) -> None:
    """Add `name`; re-registering the same target is a no-op, another target under a taken name an error."""
    if name in entries and entries[name] is not target and entries[name] != target:
        raise WorkbenchError(f"{kind} '{name}' is already registered ({entries[name]}): choose another name")
    entries[name] = target


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
