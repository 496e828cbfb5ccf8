"""The bandwidth scope of a sweep point: per connection (toxiproxy) or per link (the nodes' netns caps)."""

import pytest

from workbench.bench.point_network import link_namespaces, rates_match, stack_hosts
from workbench.bench.sweep_config import SweepConfig
from workbench.config import Settings
from workbench.errors import WorkbenchError


def test_a_link_cap_matches_only_both_directions_at_the_rate():
    assert rates_match({"eth0": 100_000_000, "wb-ifb": 100_000_000}, 100e6)
    assert rates_match({"eth0": 99_999_000, "wb-ifb": 100_000_000}, 100e6)  # tc rounds
    assert not rates_match({"eth0": 100_000_000}, 100e6)  # ingress lost its shaper
    assert not rates_match({"eth0": 1_000_000_000, "wb-ifb": 1_000_000_000}, 100e6)
    assert not rates_match({}, 100e6)
    assert rates_match({}, 0)  # uncapped: no tbf at all
    assert not rates_match({"eth0": 100_000_000, "wb-ifb": 100_000_000}, 0)


def test_link_scope_on_loopback_nodes_is_one_line_that_says_how_to_get_namespaces():
    settings = Settings(host="127.0.0.1", node_network="loopback")
    with pytest.raises(WorkbenchError) as info:
        link_namespaces(settings)
    message = str(info.value)
    assert "\n" not in message and "WORKBENCH_NODE_NETWORK=netns" in message and "bandwidth_scope" in message


def test_the_stack_takes_as_many_hosts_as_its_largest_service():
    assert stack_hosts(Settings(cassandra_nodes=3, cassandra_replication_factor=1)) == 3
    assert stack_hosts(Settings()) == 1


def test_the_scope_is_validated_and_defaults_to_per_connection():
    base = {"name": "t", "loaders": ["fs"], "network": {"rtt_ms": [0], "bandwidth_mbps": [100]}}
    assert SweepConfig.model_validate(base).network.bandwidth_scope == "connection"
    linked = {**base, "network": {**base["network"], "bandwidth_scope": "link"}}
    assert SweepConfig.model_validate(linked).network.bandwidth_scope == "link"
    with pytest.raises(Exception, match="bandwidth_scope"):
        SweepConfig.model_validate({**base, "network": {**base["network"], "bandwidth_scope": "wire"}})
