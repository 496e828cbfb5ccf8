
import pytest
from credential_checks import check_first_credentials

from workbench.config import Settings, ensure_credentials, get_settings
from workbench.errors import WorkbenchError


def test_ports_direct_and_via_proxy():
    s = Settings(_env_file=None)
    assert s.port("cassandra") == 9042 and s.port("cassandra", via_proxy=True) == 19042
    assert s.s3_endpoint(via_proxy=True) == "http://127.0.0.1:19000"


def test_the_stacks_default_ports_lie_outside_linuxs_ephemeral_range():
    """A server port inside the range may be held by any outgoing connection when the server starts."""
    ephemeral = range(32768, 61000)  # Linux's default net.ipv4.ip_local_port_range
    s = Settings(_env_file=None)
    ports = {name: value for name, value in Settings.model_fields.items() if name.endswith("_port")}
    assert {"ignite_discovery_port", "ignite_communication_port", "cassandra_port"} <= set(ports)
    assert [name for name in ports if getattr(s, name) in ephemeral] == []


def test_unknown_service_path_is_a_clear_error():
    with pytest.raises(WorkbenchError, match="unknown service path 'redis'"):
        Settings(_env_file=None).port("redis")


def test_missing_s3_credentials_say_where_to_set_them(monkeypatch):
    monkeypatch.delenv("WORKBENCH_S3_ACCESS_KEY", raising=False)
    monkeypatch.delenv("WORKBENCH_S3_SECRET_KEY", raising=False)
    with pytest.raises(WorkbenchError, match="WORKBENCH_S3_ACCESS_KEY"):
        Settings(_env_file=None).s3_credentials()


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CASSANDRA_PORT", "9142")
    assert Settings(_env_file=None).cassandra_port == 9142


def test_ensure_credentials_writes_private_env_file_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_S3_ACCESS_KEY", raising=False)
    monkeypatch.delenv("WORKBENCH_S3_SECRET_KEY", raising=False)
    env = tmp_path / ".env"
    first = check_first_credentials(env)
    assert "WORKBENCH_S3_SECRET_KEY=" in first
    get_settings.cache_clear()
    assert ensure_credentials(env) is False
    assert env.read_text() == first
    access, secret = Settings().s3_credentials()
    assert len(secret) >= 24 and access.startswith("wb-")


def test_secrets_lists_configured_values():
    s = Settings(_env_file=None, s3_access_key="AK", s3_secret_key="SK", cassandra_password="pw")
    assert set(s.secrets()) == {"AK", "SK", "pw"}
    assert "SK" not in repr(s) and "SK" not in str(s.model_dump())
