"""Where each ingested dataset lives (keyspace, bucket/prefix, cache, folder) and what it came from.

`ingest` records it; loaders find a dataset through `workbench.backends.locate`, which falls back to
the backend's default layout for data ingested elsewhere (a compose or external stack). This module
only reads and writes the entries, so it sits below the backends.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.config import Settings


def catalog_path(settings: Settings, backend: str, dataset: str) -> Path:
    return settings.state_dir / "catalog" / backend / f"{dataset}.json"


def record(settings: Settings, backend: str, dataset: str, entry: dict) -> Path:
    """Write the entry atomically."""
    path = catalog_path(settings, backend, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(entry, indent=2, default=str))
    tmp.replace(path)
    return path


def entry(settings: Settings, backend: str, dataset: str) -> dict | None:
    """The recorded entry of `dataset` in `backend`, or None when this catalog has none."""
    path = catalog_path(settings, backend, dataset)
    return json.loads(path.read_text()) if path.exists() else None


def forget(settings: Settings, backend: str, dataset: str) -> None:
    catalog_path(settings, backend, dataset).unlink(missing_ok=True)


def known(settings: Settings, backend: str) -> list[str]:
    return sorted(p.stem for p in (settings.state_dir / "catalog" / backend).glob("*.json"))


def recorded(settings: Settings) -> list[tuple[str, str]]:
    """(backend, dataset) of every entry of this catalog, sorted."""
    root = settings.state_dir / "catalog"
    backends = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [(backend, dataset) for backend in backends for dataset in known(settings, backend)]


def recorded_samples(entry: dict) -> int:
    """How many samples the entry's last ingest left stored (written now plus found already stored)."""
    last = entry.get("last_ingest") or {}
    return int(last.get("samples", 0)) + int(last.get("already_stored", 0))
