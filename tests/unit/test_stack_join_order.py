"""`up` starts node 1 and on only once node 0 lets them join (`Service.joinable`): waiting, giving up, refusing;
and waits for every started node to be healthy the same way."""

from __future__ import annotations

import sys

import pytest

from workbench.config import Settings
from workbench.stack.manager import _wait_healthy, _wait_joinable, process_of
from workbench.stack.service import Health, Launch, Service


class Sleeper(Service):
    """A real process (a sleeping Python) whose node 0 becomes joinable after `ready_after` polls."""

    name = "sleeper"
    version = "1"
    startup_timeout_s = 2.0

    def __init__(self, settings: Settings, node: int = 0, ready_after: int = 0) -> None:
        super().__init__(settings, node)
        self.polls, self.ready_after = 0, ready_after
        self.probes, self.healthy_after = 0, 0

    def provision(self) -> None:
        pass

    def launch(self) -> Launch:
        return Launch([sys.executable, "-c", "import time; time.sleep(60)"])

    def ports(self) -> dict[str, int]:
        return {"main": 1}

    def probe(self) -> Health:
        self.probes += 1
        return Health(self.probes > self.healthy_after, detail=f"probe {self.probes}")

    def joinable(self) -> bool:
        self.polls += 1
        return self.polls > self.ready_after


@pytest.fixture
def first(tmp_path):
    node = Sleeper(Settings(_env_file=None, state_dir=tmp_path), ready_after=2)
    yield node
    process_of(node).stop(grace_s=1)


def started(node: Sleeper) -> None:
    launch = node.launch()
    process_of(node).start(launch.command, launch.env, launch.cwd)


def test_peers_wait_for_a_running_node_0_until_it_is_joinable(first):
    started(first)
    assert _wait_joinable(first) is None
    assert first.polls == 3


def test_peers_are_not_started_beside_a_node_0_that_is_not_running(first):
    assert "sleeper, which it joins, is not running" in _wait_joinable(first)


def test_peers_give_up_on_a_node_0_that_never_becomes_joinable(first):
    first.ready_after = 10**6
    started(first)
    assert "was not ready for it after 2s" in _wait_joinable(first)


def test_a_started_node_is_waited_for_until_healthy(first):
    first.healthy_after = 2
    started(first)
    assert _wait_healthy(first).healthy and first.probes == 3


def test_a_node_that_never_gets_healthy_is_reported_with_its_last_probe_and_log(first):
    first.healthy_after = 10**6
    started(first)
    health = _wait_healthy(first)
    assert not health.healthy and "not healthy after 2s (probe " in health.detail and "sleeper" in health.detail


def test_a_node_that_exits_during_start_up_is_reported_at_once(first):
    first.healthy_after = 10**6
    health = _wait_healthy(first)  # never started: no process
    assert not health.healthy and health.detail.startswith("exited during start-up; log ") and first.probes == 1
