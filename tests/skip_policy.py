"""With CI=true (as .ci/run runs) a skipped test fails: `make test` installs every tool the suite needs, so a skip
there is a missing install step, not an optional extra. Only the GPU's absence may skip a test (marker `gpu`, or
a skip whose reason names the GPU). A pytest plugin of its own, so a test can run it on a suite of its own."""

from __future__ import annotations

import os

import pytest

GPU_WORD = "GPU"


def strict() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def skip_allowed(reason: str, keywords) -> bool:
    """Whether a skip may stand under CI=true: a `gpu` test, or a skip whose reason is the GPU."""
    return "gpu" in keywords or GPU_WORD in reason


def _reason(longrepr) -> str:
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def fail_skip(report, where: str, keywords) -> None:
    """Turn a skipped report into a failed one naming the skip, unless the skip is allowed or not under CI."""
    if not (report.skipped and strict()) or hasattr(report, "wasxfail"):
        return
    reason = _reason(report.longrepr)
    if skip_allowed(reason, keywords):
        return
    report.outcome = "failed"
    report.longrepr = (f"{where} skipped under CI=true ({reason}): `make test` installs every tool the suite "
                       "needs; install the missing one (tests/README.md, 'No silent skips') or fix that install step")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    fail_skip(outcome.get_result(), item.nodeid, item.keywords)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    fail_skip(outcome.get_result(), collector.nodeid, collector.keywords)
