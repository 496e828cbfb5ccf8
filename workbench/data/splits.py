"""Train/val(/test) split files, made per class like the cassandra-dali-plugin split tool.

A split file is small JSON (ids only), so every loader reads exactly the same samples whatever
backend holds them, and the same seed always gives the same split.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from workbench.errors import WorkbenchError

FORMAT = "workbench-split"
VERSION = 1

Balance = Literal["original", "random"] | Sequence[float]


@dataclass
class SplitFile:
    """Named lists of sample ids plus how they were made (seed, ratios, balance)."""

    dataset: str
    splits: dict[str, list[uuid.UUID]]  # split name -> ids, sorted by id (stable, class-mixed)
    seed: int
    ratios: list[float]
    balance: str | list[float] = field(default="original")

    def counts(self) -> dict[str, int]:
        """Number of ids per split, for reports."""
        return {name: len(ids) for name, ids in self.splits.items()}

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form; ids as strings."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "dataset": self.dataset,
            "seed": self.seed,
            "ratios": self.ratios,
            "balance": self.balance,
            "splits": {name: [str(i) for i in ids] for name, ids in self.splits.items()},
        }

    def save(self, path: Path | str) -> None:
        """Write the split as JSON (one id per line keeps diffs readable)."""
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path | str) -> SplitFile:
        """Read and validate a split file; bad content raises WorkbenchError naming the file."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, UTF-8 or a 4300+ digit number
            raise WorkbenchError(f"split file {path}: cannot read JSON ({exc})") from None
        try:
            return cls._from_json(doc)
        except (KeyError, TypeError, ValueError, OverflowError, WorkbenchError) as exc:  # Overflow: float(10**400)
            raise WorkbenchError(f"split file {path}: invalid content ({_reason(exc)})") from None

    @classmethod
    def _from_json(cls, doc: Any) -> SplitFile:
        """Structure checks; raises KeyError/TypeError/ValueError with a short reason."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise WorkbenchError(f"not a {FORMAT} document")
        splits_doc = doc["splits"]
        if not isinstance(splits_doc, dict) or not all(isinstance(v, list) for v in splits_doc.values()):
            raise TypeError("'splits' must map split names to lists of ids")
        splits = {str(name): [uuid.UUID(str(i)) for i in ids] for name, ids in splits_doc.items()}
        seen: set[uuid.UUID] = set()
        for ids in splits.values():
            if seen.intersection(ids) or len(set(ids)) != len(ids):
                raise WorkbenchError("an id appears more than once")
            seen.update(ids)
        ratios = [float(r) for r in doc["ratios"]]
        seed = doc["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError("'seed' must be an integer")
        balance = doc.get("balance", "original")
        if not isinstance(balance, str):
            balance = [float(w) for w in balance]
        return cls(dataset=str(doc["dataset"]), splits=splits, seed=seed, ratios=ratios, balance=balance)


def _reason(exc: Exception) -> str:
    """One-line reason; KeyError's repr alone ('x') is too terse."""
    return f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)


def parse_ratios(text: str) -> list[float]:
    """``"8,2"`` -> ``[8.0, 2.0]``; ratios are relative weights, so they need not sum to 1."""
    try:
        ratios = [float(part) for part in text.split(",")]
    except ValueError:
        raise WorkbenchError(f"bad ratios {text!r}: use comma-separated positive numbers, e.g. 8,2") from None
    _check_ratios(ratios, context=f"bad ratios {text!r}")
    return ratios


def _check_ratios(ratios: Sequence[float], context: str = "bad ratios") -> None:
    """Ratios must be finite and positive."""
    if not ratios or any(not math.isfinite(r) or r <= 0 for r in ratios):
        raise WorkbenchError(f"{context}: every ratio must be a positive number, got {list(ratios)}")


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` proportionally to ``weights`` into integers that sum exactly to ``total``.

    Each part gets the floor of its quota; the leftover units go to the largest fractional
    parts (ties: earlier part first), so counts never drift from the ratios by a whole unit.
    """
    wsum = float(sum(weights))
    quotas = [total * w / wsum for w in weights]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda j: (-(quotas[j] - counts[j]), j))
    for j in order[: total - sum(counts)]:
        counts[j] += 1
    return counts


def make_split(
    items: Iterable[tuple[uuid.UUID, int]],
    ratios: Sequence[float] = (8, 2),
    names: Sequence[str] = ("train", "val"),
    balance: Balance = "original",
    seed: int = 0,
    dataset: str = "",
) -> SplitFile:
    """Split ``(id, label)`` pairs per class so every split keeps the class proportions.

    Within each class the ids are sorted, shuffled with ``seed`` and cut by ``ratios`` using
    largest-remainder rounding, so class counts per split are exact and sum to the class size.
    The result does not depend on the order of ``items``.

    ``balance`` first decides how many samples of each class are used:

    - ``"original"``: all of them (the dataset's own class distribution).
    - ``"random"``: each class keeps a seeded random fraction in [0.5, 1] of its samples (at least
      one), giving a randomly imbalanced dataset to test loaders under skew.
    - a sequence of weights, one per distinct label in ascending label order: the weights become
      the class proportions of the result, using as many samples as possible. Equal weights give
      a balanced dataset of ``num_classes x smallest class``; a weight of 0 drops that class.

    Each split's ids are sorted by id: deterministic, and classes come out interleaved.
    """
    names, ratios = list(names), [float(r) for r in ratios]
    _check_names(names, ratios)
    by_class = _group(items)
    labels = sorted(by_class)
    rng = np.random.default_rng(seed)
    keep = _class_counts(balance, [len(by_class[c]) for c in labels], rng)
    splits: dict[str, list[uuid.UUID]] = {n: [] for n in names}
    for label, n_keep in zip(labels, keep, strict=True):
        ids = sorted(by_class[label], key=lambda u: u.int)
        chosen = [ids[k] for k in rng.permutation(len(ids))[:n_keep]]
        start = 0
        for split_name, n in zip(names, largest_remainder(n_keep, ratios), strict=True):
            splits[split_name].extend(chosen[start : start + n])
            start += n
    for ids in splits.values():
        ids.sort(key=lambda u: u.int)
    balance_doc = balance if isinstance(balance, str) else [float(w) for w in balance]
    return SplitFile(dataset=dataset, splits=splits, seed=seed, ratios=ratios, balance=balance_doc)


def _check_names(names: list[str], ratios: list[float]) -> None:
    """One positive ratio per distinct, non-empty split name."""
    if len(names) != len(ratios):
        raise WorkbenchError(
            f"got {len(ratios)} ratios for {len(names)} split names {names}: give one ratio per split"
        )
    if len(set(names)) != len(names) or not all(names):
        raise WorkbenchError(f"split names must be distinct and non-empty, got {names}")
    _check_ratios(ratios)


def _group(items: Iterable[tuple[uuid.UUID, int]]) -> dict[int, list[uuid.UUID]]:
    """Ids by label; duplicate ids are an error (they would land in two splits)."""
    by_class: dict[int, list[uuid.UUID]] = defaultdict(list)
    seen: set[uuid.UUID] = set()
    for sid, label in items:
        if sid in seen:
            raise WorkbenchError(f"duplicate sample id {sid} in split input")
        seen.add(sid)
        by_class[label].append(sid)
    return by_class


def _class_counts(balance: Balance, sizes: list[int], rng: np.random.Generator) -> list[int]:
    """How many samples to keep per class (see :func:`make_split` for the meaning of ``balance``)."""
    if isinstance(balance, str):
        if balance == "original":
            return sizes
        if balance == "random":
            fractions = rng.uniform(0.5, 1.0, len(sizes))
            return [max(1, round(f * n)) if n else 0 for f, n in zip(fractions, sizes, strict=True)]
        raise WorkbenchError(f"unknown balance '{balance}': use original, random or one weight per class")
    weights = [float(w) for w in balance]
    if len(weights) != len(sizes):
        raise WorkbenchError(
            f"got {len(weights)} balance weights for {len(sizes)} classes: give one weight per class"
        )
    if any(not math.isfinite(w) or w < 0 for w in weights) or not any(weights):
        raise WorkbenchError(f"balance weights must be >= 0 with at least one > 0, got {weights}")
    total = sum(weights)
    props = [w / total for w in weights]
    # Largest dataset whose class proportions are `props` and fits every class.
    scale = min(n / p for n, p in zip(sizes, props, strict=True) if p > 0)
    return [min(n, math.floor(scale * p + 1e-9)) for n, p in zip(sizes, props, strict=True)]
