"""A pytest plugin (``-p hypothesis_small``) that tests/mutation/run.py passes to pytest in mutation runs: every
hypothesis property runs 25 derandomized examples, without a deadline, database, shrinking or health checks.

Why: a property's 60-150 examples are for finding a new bug; a mutant is judged by whether any example fails,
and each mutant reruns the properties that reach it, so full-size properties made the layouts' runs hours long.
Derandomized, the same mutant is killed or not on every run; no deadline or health check, so a loaded machine's
slowness never counts as a kill; no shrinking, since only *whether* a test fails matters here. Explicit
``@settings(max_examples=...)`` on a test overrides a profile, so each collected property's own settings are
capped too (hypothesis reads ``_hypothesis_internal_use_settings`` when the test runs).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings

MAX_EXAMPLES = 25
_SMALL = {"deadline": None, "derandomize": True, "database": None, "suppress_health_check": list(HealthCheck),
          "phases": (Phase.explicit, Phase.reuse, Phase.generate)}

settings.register_profile("mutation", max_examples=MAX_EXAMPLES, **_SMALL)
settings.load_profile("mutation")


def small(current: settings) -> settings:
    """`current` with at most MAX_EXAMPLES examples and the mutation run's other settings."""
    return settings(current, max_examples=min(current.max_examples, MAX_EXAMPLES), **_SMALL)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        test = getattr(item, "obj", None)
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if getattr(test, "is_hypothesis_test", False) and isinstance(current, settings):
            test._hypothesis_internal_use_settings = small(current)
