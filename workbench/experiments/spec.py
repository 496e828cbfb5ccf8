"""An experiment spec: YAML with a `kind`, read into that kind's frozen model, every problem one line.

Why one reader for every kind: a spec names its field, its place in the file and the valid choices when it is
wrong, before anything runs, the same way for a benchmark, a sweep or a study. `-o key=value` overrides a field
(dotted for nested ones, the value read as YAML: `-o rtt_ms=[0,50]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from workbench.errors import WorkbenchError


class ExperimentSpec(BaseModel):
    """What every kind's spec holds: its kind and where its results go. Frozen: a spec is what ran."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    results_dir: Path

    def to_yaml(self) -> str:
        """The spec as YAML that `load_spec` reads back into an equal spec."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """The mapping in `path` and the line (1-based) of every key in it, by its path of keys."""
    if not path.is_file():
        raise WorkbenchError(f"spec {path} does not exist: give the path of a YAML spec (see specs/)")
    try:
        text = path.read_text()
        raw = yaml.safe_load(text)
        node = yaml.compose(text)
    except (yaml.YAMLError, OSError, UnicodeDecodeError, RecursionError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise WorkbenchError(f"spec {path} is not valid YAML: {first}") from None
    if not isinstance(raw, dict):
        raise WorkbenchError(f"spec {path}: expected a mapping with a 'kind', got {type(raw).__name__}")
    return raw, _key_lines(node, ())


def _key_lines(node: Any, prefix: tuple[str, ...]) -> dict[tuple[str, ...], int]:
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, str(key.value))
            lines[path] = key.start_mark.line + 1
            lines.update(_key_lines(value, path))
    return lines


def places_of(where: str, lines: dict[tuple[str, ...], int], overrides: list[str]) -> dict[tuple[str, ...], str]:
    """Where each key's value comes from, for messages: its line in the file, or the override that set it."""
    places = {key: f"{where}:{line}" for key, line in lines.items()}
    for override in overrides:
        places[tuple(override.partition("=")[0].strip().split("."))] = f"-o {override}"
    return places


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`raw` with each ``key=value`` of `overrides` set (dotted keys reach into sections; values are YAML)."""
    result = dict(raw)
    for override in overrides:
        key, sep, text = override.partition("=")
        if not sep or not key.strip():
            raise WorkbenchError(f"override {override!r}: write it as key=value (e.g. -o repeats=5)")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise WorkbenchError(f"override {override!r}: the value is not valid YAML") from None
        *sections, last = key.strip().split(".")
        target = result
        for section in sections:
            inner = target.get(section)
            target[section] = dict(inner) if isinstance(inner, dict) else {}
            target = target[section]
        target[last] = value
    return result


def validate(model: type[ExperimentSpec], raw: dict[str, Any], where: str,
             places: dict[tuple[str, ...], str]) -> ExperimentSpec:
    """`model` from `raw`, or one line per problem: ``<place> '<field>': <why> (valid: ...)``, the place being
    `places`' entry for the field or its nearest section (``spec.yaml:6``, ``-o count=5``), else `where`."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            place = next((places[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in places), where)
            name = ".".join(loc) or "spec"
            if err["type"] == "extra_forbidden":
                valid = ", ".join(_fields_at(model, loc[:-1]))
                problems.append(f"{place} unknown field '{name}' (valid: {valid})")
            else:
                problems.append(f"{place} '{name}': {err['msg'].removeprefix('Value error, ')}")
        raise WorkbenchError("; ".join(problems).replace("\n", "\\n")) from None


def _fields_at(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The field names of the section at `loc` (the model itself for the top level)."""
    for part in loc:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
    return list(model.model_fields)
