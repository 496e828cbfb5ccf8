"""Catalog reconcile: what the catalog says was ingested against what each service really holds.

Services lose data behind the catalog's back: an in-memory Ignite cluster restarted, a keyspace dropped, a
prefix or a folder deleted. `check` asks every recorded dataset's backend for the ids it stores
(`Backend.stored_ids`, through `workbench.backends`: no backend is named here) and says whether all the
samples the last ingest left are still there; when not, the ingest command that restores them (an ingest
writes only what is missing, so the same command also completes a partial dataset).

A backend whose dataset is gone either finds no ids or raises a WorkbenchError saying the keyspace, cache
or folder "does not exist" (the wording every backend uses); any other error (the service is down, a login
is refused) leaves the dataset's state unknown: "error", with the reason.
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from workbench import catalog
from workbench.backends import backend_class, make_backend
from workbench.config import Settings
from workbench.data import parse_source
from workbench.errors import WorkbenchError, first_line

MISSING = "does not exist"  # how a backend says the dataset's keyspace, cache or folder is gone
NOT_A_SPEC = ("unknown source", "bad source")  # how `parse_source` refuses text that is no source spec
PARALLEL = 4  # datasets checked at once (each check is a few requests; a dead service costs its timeout)


@dataclass(frozen=True)
class DatasetState:
    backend: str
    dataset: str
    state: Literal["ok", "stale", "error"]
    recorded: int  # samples the last ingest left stored
    stored: int | None  # samples found now (None: could not ask)
    detail: str = ""
    command: str = ""  # restores a stale dataset ("" when the catalog cannot say how it was made)


def check(settings: Settings, backends: list[str] | None = None) -> list[DatasetState]:
    """The state of every dataset of the catalog (of `backends` only, when given), in catalog order."""
    wanted = [(b, d) for b, d in catalog.recorded(settings) if not backends or b in backends]
    if not wanted:
        return []
    with ThreadPoolExecutor(min(PARALLEL, len(wanted)), thread_name_prefix="reconcile") as pool:
        return list(pool.map(lambda bd: check_one(settings, *bd), wanted))


def check_one(settings: Settings, backend: str, dataset: str) -> DatasetState:
    entry = catalog.entry(settings, backend, dataset) or {}
    recorded = catalog.recorded_samples(entry)
    try:
        stored: int | None = len(make_backend(backend, settings, dataset, **layout_options(backend, entry))
                                 .stored_ids())
        why = ""
    except WorkbenchError as exc:
        if MISSING not in str(exc):
            return DatasetState(backend, dataset, "error", recorded, None, first_line(exc, 200))
        stored, why = 0, first_line(exc, 200)
    except Exception as exc:  # a driver's own error: report it for this dataset, check the others
        return DatasetState(backend, dataset, "error", recorded, None, f"{type(exc).__name__}: {first_line(exc, 200)}")
    if stored >= recorded:
        return DatasetState(backend, dataset, "ok", recorded, stored)
    command, problem = restore_command(backend, dataset, entry)
    detail = "; ".join(p for p in (why or f"{recorded - stored} of {recorded} samples missing", problem) if p)
    return DatasetState(backend, dataset, "stale", recorded, stored, detail, command)


def layout_options(backend: str, entry: dict) -> dict:
    """The layout options recorded in a catalog entry (the entry also holds where-it-lives facts)."""
    fields = backend_class(backend).Options.model_fields
    return {k: v for k, v in entry.items() if k in fields and v is not None}


def restore_command(backend: str, dataset: str, entry: dict) -> tuple[str, str]:
    """(the `workbench ingest` command that rebuilds the dataset as recorded, why there is none)."""
    source = entry.get("source") or ""
    problem = ""
    try:
        parse_source(source)
    except WorkbenchError as exc:
        if str(exc).startswith(NOT_A_SPEC):
            return "", f"no restore command: the recorded source {source!r} is no source spec (ingested from Python?)"
        problem = f"its source cannot be read now: {first_line(exc, 160)}"  # e.g. an image folder moved away
    defaults = backend_class(backend).Options().model_dump(mode="json")
    args = ["workbench", "ingest", "--source", source, "--backend", backend, "--dataset", dataset]
    for key, value in layout_options(backend, entry).items():
        if value != defaults.get(key):
            args += ["-o", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return shlex.join(args), problem
