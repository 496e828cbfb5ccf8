"""Pure logic of the native ceilings' runner: configs, names, CPU columns, credentials kept off argv."""

from __future__ import annotations

import math

import pytest
from pydantic import SecretStr

from workbench.bench.native_ceilings import CeilingConfig, command_for, cpu_columns, program_name
from workbench.config import Settings
from workbench.errors import WorkbenchError


def test_cpu_columns_are_medians_per_sample_and_per_mb():
    results = [(1.0, 1000, 100_000_000), (1.0, 1000, 100_000_000), (1.0, 0, 0)]
    columns = cpu_columns(results, [0.5, 0.7, 0.1])
    assert columns["cpu_us_per_sample"] == pytest.approx(600.0)  # median of 500 and 700 µs
    assert columns["cpu_ms_per_mb"] == pytest.approx(6.0)  # median of 5 and 7 ms per MB


def test_cpu_columns_of_nothing_read_are_nan():
    columns = cpu_columns([(1.0, 0, 0)], [0.2])
    assert math.isnan(columns["cpu_us_per_sample"]) and math.isnan(columns["cpu_ms_per_mb"])


def test_a_loader_config_is_accepted_as_it_is():
    config = CeilingConfig(dataset="d", concurrency=32, via_proxy=True, batch_size=64, shuffle=False)
    assert (config.split, config.concurrency, config.via_proxy) == ("train", 32, True)


def test_an_unknown_backend_names_the_known_ones():
    with pytest.raises(WorkbenchError, match="s3-objects"):
        program_name("hdfs")


def test_credentials_travel_in_the_environment_never_on_the_command_line(tmp_path, monkeypatch):
    import workbench.bench.native_ceilings as native

    monkeypatch.setattr(native, "go_program", lambda settings, name: tmp_path / name)  # no build needed
    settings = Settings(_env_file=None, state_dir=tmp_path, s3_access_key=SecretStr("AKIA-test-access"),
                        s3_secret_key=SecretStr("s3cr3t-test-value"), cassandra_username="user",
                        cassandra_password=SecretStr("cql-s3cr3t"))
    s3 = command_for(settings, "s3-objects", CeilingConfig(dataset="d", via_proxy=True))
    assert "s3cr3t-test-value" not in " ".join(s3.argv) and "AKIA-test-access" not in " ".join(s3.argv)
    assert s3.env["CEILING_SECRET_KEY"] == "s3cr3t-test-value"
    assert f"127.0.0.1:{settings.proxy_s3_port}" in s3.argv
    assert not any(k.startswith("WORKBENCH_") for k in s3.env)
