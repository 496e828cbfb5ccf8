"""The mutation testing driver's pure parts (tests/mutation/run.py): reading mutmut's results into the table,
which mutants count for a module, and which unit tests each module runs against."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutation_run", ROOT / "tests" / "mutation" / "run.py")
run = importlib.util.module_from_spec(_spec)
sys.modules["mutation_run"] = run  # dataclasses look their module up while the class is made
_spec.loader.exec_module(run)

RESULTS = """\
    workbench.loaders.order.x_take_shard__mutmut_1: killed
    workbench.loaders.order.x_take_shard__mutmut_2: survived
    workbench.loaders.order.xǁShardResumeǁitems__mutmut_3: timeout
    workbench.loaders.order.xǁShardResumeǁitems__mutmut_4: no tests
    workbench.loaders.order.x_epoch_order__mutmut_7: not checked
    workbench.concurrency.windows.xǁFixedWindowǁ__init____mutmut_1: killed
    workbench.concurrency.windows.xǁRoundTripWindowǁfinished__mutmut_1: survived
    ⠋ 3/7  🎉 1 🫥 0
Saved CI/CD stats
"""


def test_results_lines_become_name_to_status_and_nothing_else():
    statuses = run.parse_results(RESULTS)
    assert len(statuses) == 7
    assert statuses["workbench.loaders.order.x_take_shard__mutmut_2"] == "survived"
    assert statuses["workbench.loaders.order.xǁShardResumeǁitems__mutmut_4"] == "no tests"
    assert statuses["workbench.loaders.order.x_epoch_order__mutmut_7"] == "not checked"


def test_a_row_counts_killed_and_timeouts_as_caught_and_leaves_unjudged_out_of_the_score():
    row = run.tally("loaders.order", run.parse_results(RESULTS), run.MODULES["loaders.order"])
    assert (row.mutants, row.killed, row.unjudged, row.survived, row.timeouts) == (5, 2, 1, 2, 1)
    assert row.score == pytest.approx(50.0)
    assert run.Row("m", 0, 0).score == 0.0


def test_a_scoped_module_counts_only_the_functions_in_its_scope():
    statuses = run.parse_results(RESULTS)
    row = run.tally("concurrency.windows", statuses, run.MODULES["concurrency.windows"])
    assert (row.mutants, row.killed) == (1, 1)  # RoundTripWindow is tested with its users: out of scope
    assert run.survivors(statuses, run.MODULES["concurrency.windows"]) == []
    assert run.survivors(statuses, run.MODULES["loaders.order"]) == [
        "workbench.loaders.order.x_take_shard__mutmut_2", "workbench.loaders.order.xǁShardResumeǁitems__mutmut_4"]


def test_the_table_has_one_row_per_module_with_its_score():
    table = run.format_table([run.Row("data.splits", 310, 291), run.Row("bench.points", 21, 21, timeouts=2)])
    lines = table.splitlines()
    assert lines[0] == "| module | mutants | killed | survived | score | timeouts |"
    assert lines[2:] == ["| data.splits | 310 | 291 | 19 | 93.9% | 0 |", "| bench.points | 21 | 21 | 0 | 100.0% | 2 |"]


def test_every_module_maps_to_its_source_and_existing_unit_tests():
    assert set(run.MODULES) >= {"layouts.shards", "layouts.objects", "data.shard_spans", "data.splits",
                                "bench.points", "concurrency.windows", "concurrency.auto_window", "loaders.order",
                                "loaders.resume"}
    for name, spec in run.MODULES.items():
        assert (ROOT / spec.path).is_file(), name
        assert spec.dotted == "workbench." + name
        assert spec.tests and all(t.startswith("tests/unit/test_") for t in spec.tests), name
        present = [t for t in spec.tests if (ROOT / t).is_file()]
        assert all(run.is_mutants_file(t) for t in spec.tests if t not in present), name
        assert any(not run.is_mutants_file(t) for t in present), f"{name}: no existing unit test covers it"


def test_patterns_are_the_whole_module_or_its_scope():
    assert run.MODULES["data.splits"].patterns() == ["workbench.data.splits.*"]
    assert run.MODULES["concurrency.auto_window"].patterns() == ["workbench.concurrency.auto_window.*"]
    windows = run.MODULES["concurrency.windows"]
    assert "workbench.concurrency.windows.xǁFixedWindowǁ*__mutmut_*" in windows.patterns()
    assert "workbench.concurrency.windows.x_make_window__mutmut_*" in windows.patterns()
    assert run.in_scope("workbench.concurrency.windows.xǁFixedWindowǁ__init____mutmut_2", windows)
    assert not run.in_scope("workbench.concurrency.windows.xǁRoundTripWindowǁfinished__mutmut_2", windows)


def test_the_mutmut_section_mutates_one_file_against_its_tests():
    spec = run.MODULES["loaders.order"]
    section = tomllib.loads(run.mutmut_section(spec))["tool"]["mutmut"]
    assert section["only_mutate"] == ["workbench/loaders/order.py"]
    assert section["pytest_add_cli_args_test_selection"] == list(spec.tests)
    assert section["source_paths"] == ["workbench"]
    assert section["use_git_change_detection"] is False


def test_only_the_files_of_tests_against_survivors_may_be_missing():
    assert run.is_mutants_file("tests/unit/test_data_splits_mutants.py")
    assert not run.is_mutants_file("tests/unit/test_splits.py")
    assert not run.is_mutants_file("tests/services/test_x_mutants.py")
