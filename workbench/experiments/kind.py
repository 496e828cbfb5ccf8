"""What one experiment kind is: its spec model and how it runs. A new kind is one module defining a `Kind`,
and one line in `KINDS` (workbench/experiments/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator

from workbench.backends import BACKENDS
from workbench.concurrency import Concurrency, parse_concurrency
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.experiments.spec import ExperimentSpec
from workbench.loaders import LOADERS

LoaderName = Annotated[str, AfterValidator(lambda name: LOADERS.check_names([name])[0])]  # a registered loader
LoaderNames = Annotated[list[str], AfterValidator(LOADERS.check_names)]
BackendNames = Annotated[list[str], AfterValidator(BACKENDS.check_names)]


@dataclass(frozen=True)
class Outcome:
    """What a run made: the folder holding its results (the runner writes the spec there) and its rows."""

    folder: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    report: Path | None = None  # the report page built from the results, when the kind builds one


@dataclass(frozen=True)
class Kind:
    """An experiment kind: `run(settings, spec)` measures what `spec` (a `Spec`) asks for; `summary(spec, outcome)`
    is what the command line prints of it (a rich renderable; None: only the results folder)."""

    name: str
    Spec: type[ExperimentSpec]
    run: Callable[[Settings, Any], Outcome]
    summary: Callable[[Any, Outcome], Any] | None = None


class ConcurrencyField(ExperimentSpec):
    """Specs with a concurrency: "auto" or 1-1024 requests in flight."""

    concurrency: Concurrency = "auto"

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> Concurrency:
        try:
            return parse_concurrency(value)
        except WorkbenchError as exc:
            raise ValueError(str(exc)) from None


class LoadersField(ConcurrencyField):
    """Specs that name loaders (None: the loaders measured by default)."""

    loaders: LoaderNames | None = Field(None, min_length=1, description="default: the loaders measured by default")
