"""Catalog reconcile against a backend defined here: ok, partial, gone, unknown; the restore command."""

from __future__ import annotations

import shlex
import uuid

import pytest
from pydantic import Field
from typer.testing import CliRunner

from workbench import catalog
from workbench.backends import BACKENDS, Backend, LayoutOptions, register_backend
from workbench.cli_catalog import app
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.reconcile import check

NAME = "memo-test"
HELD: dict[str, object] = {}  # dataset -> the ids its "service" holds, or the error it raises


class MemoOptions(LayoutOptions):
    shelf: str = Field("a", description="where the samples go")


class MemoBackend(Backend):
    name = NAME
    Options = MemoOptions

    def stored_ids(self) -> set[uuid.UUID]:
        held = HELD[self.dataset]
        if isinstance(held, Exception):
            raise held
        assert self.options.shelf == "b" or self.dataset != "moved"  # the recorded layout options are used
        return set(held)

    def prepare(self, splits) -> None: ...
    def write(self, samples, progress) -> None: ...
    def scan(self): return iter(())
    def drop_layout(self) -> None: ...


def ids(n: int) -> set[uuid.UUID]:
    return {uuid.uuid4() for _ in range(n)}


@pytest.fixture
def settings(tmp_path):
    register_backend(NAME, MemoBackend)
    settings = Settings(state_dir=tmp_path)

    def recorded(dataset: str, samples: int, source: str = "synthetic:10", **options) -> None:
        entry = {"backend": NAME, "dataset": dataset, **MemoOptions(**options).model_dump(), "source": source,
                 "last_ingest": {"samples": samples - 2, "already_stored": 2}}
        catalog.record(settings, NAME, dataset, entry)

    recorded("whole", 10)
    recorded("partial", 10)
    recorded("gone", 10, source="imagefolder:" + str(tmp_path / "moved away"))
    recorded("moved", 5, shelf="b", workers=3)
    recorded("unknown", 10)
    recorded("handmade", 4, source="tmade1234")
    HELD.update(whole=ids(10), partial=ids(7), moved=set(),
                gone=WorkbenchError("memo shelf 'gone' does not exist: ingest it first"),
                unknown=WorkbenchError("cannot reach memo at 127.0.0.21:1: connection refused"), handmade=set())
    yield settings
    BACKENDS.pop(NAME)


def test_each_dataset_gets_its_state_and_stale_ones_the_command_that_restores_them(settings, tmp_path):
    states = {s.dataset: s for s in check(settings)}
    assert states["whole"].state == "ok" and (states["whole"].recorded, states["whole"].stored) == (10, 10)
    assert states["partial"].state == "stale" and "3 of 10 samples missing" in states["partial"].detail
    assert states["partial"].command == f"workbench ingest --source synthetic:10 --backend {NAME} --dataset partial"
    assert states["gone"].state == "stale" and states["gone"].stored == 0 and "does not exist" in states["gone"].detail
    assert shlex.split(states["gone"].command)[3] == f"imagefolder:{tmp_path / 'moved away'}"
    assert "its source cannot be read now: image folder" in states["gone"].detail
    assert shlex.split(states["moved"].command)[-4:] == ["-o", "workers=3", "-o", "shelf=b"]
    assert states["unknown"].state == "error" and states["unknown"].stored is None and not states["unknown"].command
    assert "cannot reach" in states["unknown"].detail
    assert states["handmade"].state == "stale" and not states["handmade"].command
    assert "'tmade1234' is no source spec" in states["handmade"].detail


def test_other_backends_are_left_out_when_asked(settings):
    assert check(settings, ["cassandra"]) == []
    assert len(check(settings, [NAME])) == 6


def test_the_cli_lists_each_stale_dataset_with_its_command_and_fails(settings, monkeypatch):
    monkeypatch.setattr("workbench.cli_catalog.get_settings", lambda: settings)
    result = CliRunner().invoke(app, ["check"], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith("restore ")]
    assert [line.split(":")[0] for line in lines] == [f"restore {NAME}/{d}" for d in ("gone", "handmade", "moved",
                                                                                        "partial")]
    assert f"restore {NAME}/partial: workbench ingest --source synthetic:10" in result.output
    assert "unknown" in result.output and "cannot reach" in result.output


def test_an_empty_catalog_says_so_and_succeeds(tmp_path, monkeypatch):
    monkeypatch.setattr("workbench.cli_catalog.get_settings", lambda: Settings(state_dir=tmp_path))
    result = CliRunner().invoke(app, ["check"])
    assert result.exit_code == 0 and "records no dataset" in result.output
