"""One experiment spec, one runner: ``workbench run SPEC.yaml [-o key=value ...]``.

A spec is a YAML file with a `kind`; each kind is one module here (its frozen spec model and its run) and one
line in `KINDS`. `load_spec` validates the whole spec before anything runs (a wrong field is one line naming it,
its line in the file and the valid choices); `run` runs it and writes it into the result folder as spec.yaml,
so the folder can be remade from it (``workbench run results/<folder>/spec.yaml``). The commands that measure
(`bench loaders|rss|ingest|clients|s3-clients`, `chaos`, `inference sweep|perf`, `study run`, `sweep`) are
presets: they build a spec from their flags (`make_spec`) and run it here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.experiments.kind import Kind, Outcome
from workbench.experiments.spec import ExperimentSpec, apply_overrides, places_of, read_yaml, validate
from workbench.registry import Registry
from workbench.results import SPEC_FILE, check_writable

KINDS = Registry("experiment kind", {
    "loaders": "workbench.experiments.loaders:KIND",
    "ingest": "workbench.experiments.ingest:KIND",
    "clients": "workbench.experiments.clients:KIND",
    "s3-clients": "workbench.experiments.s3_clients:KIND",
    "chaos": "workbench.experiments.chaos:KIND",
    "inference": "workbench.experiments.inference:INFERENCE",
    "perf": "workbench.experiments.inference:PERF",
    "rss": "workbench.experiments.rss:KIND",
    "sweep": "workbench.experiments.sweep:KIND",
})


def experiment_kind(name: str) -> Kind:
    return KINDS.resolve(name)  # type: ignore[return-value]


def load_spec(source: Path | str | dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> ExperimentSpec:
    """The spec in `source` (a YAML file, or its mapping) with `overrides` applied, validated by its kind."""
    if isinstance(source, dict):
        raw, lines, where = source, {}, "spec"
    else:
        raw, lines = read_yaml(Path(source))
        where = str(source)
    raw = apply_overrides(raw, list(overrides))
    places = places_of(where, lines, list(overrides))
    kind = raw.get("kind")
    if kind not in KINDS:
        found = f"unknown kind {kind!r}" if "kind" in raw else "no 'kind'"
        raise WorkbenchError(f"{places.get(('kind',), where)} {found}: give one of {', '.join(KINDS)} (kind: loaders)")
    return validate(experiment_kind(kind).Spec, raw, where, places)


def make_spec(spec_class: type[ExperimentSpec], where: str = "command line", /, **fields: Any) -> ExperimentSpec:
    """A preset's spec from its flags (None: the spec's default), one line per bad value, as for a file.
    Positional-only: a spec may have fields named like them (`model` of the Triton kinds)."""
    return validate(spec_class, {k: v for k, v in fields.items() if v is not None}, where, {})


def run(spec: ExperimentSpec | Path | str, *overrides: str, settings: Settings | None = None) -> Outcome:
    """Run `spec` (a spec, or the path of a spec file with `overrides` as ``key=value``); once it has run, its
    folder holds it as spec.yaml (a failed run writes none).

        from workbench import run
        outcome = run("specs/loaders.yaml", "loaders=[fs]", "rtt_ms=[0]")
    """
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec, overrides)
    elif overrides:
        raise WorkbenchError("overrides apply to a spec file: give its path, or change the spec itself")
    check_writable(spec.results_dir)
    outcome = experiment_kind(spec.kind).run(settings or Settings(), spec)
    (outcome.folder / SPEC_FILE).write_text(spec.to_yaml())
    return outcome


__all__ = ["KINDS", "SPEC_FILE", "ExperimentSpec", "Kind", "Outcome", "experiment_kind", "load_spec", "make_spec",
           "run"]
