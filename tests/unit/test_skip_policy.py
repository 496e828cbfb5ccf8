"""CI=true turns a skip into a failure naming it (tests/skip_policy.py), except for the GPU's absence."""

from __future__ import annotations

pytest_plugins = ["pytester"]

SUITE = """
import pytest

def test_tool_missing():
    pytest.skip("mpirun is not installed")

@pytest.mark.gpu
def test_on_the_gpu():
    pytest.skip("needs an NVIDIA GPU (none found by nvidia-smi)")

def test_reason_is_the_gpu():
    pytest.skip("this machine has a GPU; the no-GPU path is covered elsewhere")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False

def test_passes():
    assert 1 + 1 == 2
"""

MODULE_SKIP = """
import pytest
pytest.importorskip("no_such_module_here", reason="the extension is built by make venv")

def test_never_collected():
    assert True
"""


def _run(pytester, monkeypatch, ci: str | None, source: str):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    pytester.makepyfile(test_suite=source)
    return pytester.runpytest_inprocess("-p", "skip_policy", "-q")


def test_under_ci_a_skip_for_a_missing_tool_fails_naming_it_and_gpu_skips_stay(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "true", SUITE)
    result.assert_outcomes(passed=1, failed=1, skipped=2, xfailed=1)
    result.stdout.fnmatch_lines(["*test_tool_missing skipped under CI=true (mpirun is not installed)*"])


def test_outside_ci_the_same_skips_stay_skips(pytester, monkeypatch):
    for ci in (None, "false"):
        result = _run(pytester, monkeypatch, ci, SUITE)
        result.assert_outcomes(passed=1, skipped=3, xfailed=1)


def test_under_ci_a_module_level_skip_is_an_error_naming_the_module(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "1", MODULE_SKIP)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_suite.py skipped under CI=true*the extension is built by make venv*"])
