"""docker-compose.yml is checked structurally (no Docker engine runs here) against the local stack's settings."""

import json
from pathlib import Path

import pytest
import yaml

from workbench.config import PROXIED, Settings
from workbench.stack.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SETTINGS = Settings(_env_file=None)


def published(service: str) -> dict[int, int]:
    """container port -> host port, asserting every port binds to 127.0.0.1."""
    ports = {}
    for spec in COMPOSE["services"][service]["ports"]:
        host_ip, host_port, container_port = spec.split(":")
        assert host_ip == "127.0.0.1", f"{service} publishes {spec} beyond loopback"
        ports[int(container_port)] = int(host_port)
    return ports


def test_same_services_as_local_stack():
    assert set(COMPOSE["services"]) == set(SERVICES)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_healthcheck(service):
    check = COMPOSE["services"][service]["healthcheck"]
    assert check["test"] and check["retries"] > 0


def test_ports_match_settings():
    assert published("cassandra") == {9042: SETTINGS.cassandra_port}
    assert published("minio") == {9000: SETTINGS.s3_port, 9001: SETTINGS.s3_console_port}
    assert published("ignite") == {10800: SETTINGS.ignite_port}
    assert published("triton") == {
        8000: SETTINGS.triton_http_port, 8001: SETTINGS.triton_grpc_port, 8002: SETTINGS.triton_metrics_port,
    }
    proxy_ports = {SETTINGS.port(name, via_proxy=True) for name in PROXIED}
    assert set(published("toxiproxy").values()) == proxy_ports | {SETTINGS.toxiproxy_port}


def test_toxiproxy_config_matches_proxied_paths():
    proxies = {p["name"]: p for p in json.loads((ROOT / "docker" / "toxiproxy.json").read_text())}
    assert set(proxies) == set(PROXIED)
    upstream_service = {"cassandra": "cassandra", "s3": "minio", "ignite": "ignite",
                        "triton_http": "triton", "triton_grpc": "triton"}
    for name, proxy in proxies.items():
        assert int(proxy["listen"].rsplit(":", 1)[1]) == SETTINGS.port(name, via_proxy=True)
        host, port = proxy["upstream"].split(":")
        assert host == upstream_service[name]
        assert int(port) in published(host), f"{name} forwards to a port {host} does not serve"


def test_credentials_come_from_env_file():
    env = COMPOSE["services"]["minio"]["environment"]
    assert env["MINIO_ROOT_USER"].startswith("${WORKBENCH_S3_ACCESS_KEY:?")
    assert env["MINIO_ROOT_PASSWORD"].startswith("${WORKBENCH_S3_SECRET_KEY:?")
    assert "WORKBENCH_S3_ACCESS_KEY" in Settings.model_config["env_prefix"] + "S3_ACCESS_KEY"


def test_named_volumes_declared():
    declared = set(COMPOSE["volumes"])
    used = {v.split(":")[0] for s in COMPOSE["services"].values() for v in s.get("volumes", [])
            if not v.startswith(".")}
    assert used and used <= declared


def test_triton_image_has_what_the_models_import():
    triton = COMPOSE["services"]["triton"]
    dockerfile = (ROOT / triton["build"]["dockerfile"]).read_text()
    assert "tritonserver:24.10" in dockerfile  # Triton 2.51, as in the local stack
    for package in ("nvidia-dali", "torch", "cassandra-driver"):
        assert package in dockerfile
    assert triton["environment"]["WORKBENCH_HOST"] == "cassandra"


def test_triton_reserves_gpu():
    devices = COMPOSE["services"]["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


# ------------------------------------------------------------------------------------ auth and TLS configs

TLS_OVERRIDE = yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())


@pytest.fixture
def generated(tmp_path):
    """write_compose_config for a TLS stack with generated logins, in a private state dir."""
    from workbench.stack.compose import write_compose_config

    settings = Settings(_env_file=None, state_dir=tmp_path / ".stack", tls=True, s3_access_key="wb-key1",
                        s3_secret_key="s3-secret-value-1", cassandra_username="workbench",
                        cassandra_password="cassandra-secret-1", ignite_username="workbench",
                        ignite_password="ignite-secret-1")
    return settings, write_compose_config(settings)


def bind_sources(compose: dict) -> set[str]:
    return {v.split(":")[0] for s in compose["services"].values() for v in s.get("volumes", []) if v.startswith(".")}


def test_every_mounted_config_is_generated(generated):
    _, folder = generated
    sources = bind_sources(COMPOSE) | bind_sources(TLS_OVERRIDE)
    assert {"./.stack/compose/cassandra.yaml", "./.stack/compose/ignite.xml", "./.stack/compose/certs"} <= sources
    for source in sources - {"./triton_models", "./docker/toxiproxy.json"}:
        assert (folder.parent.parent / source).exists(), f"{source} is mounted but not generated"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


def test_generated_cassandra_yaml_has_auth_and_tls_at_container_paths(generated):
    _, folder = generated
    conf = yaml.safe_load((folder / "cassandra.yaml").read_text())
    assert conf["authenticator"] == "PasswordAuthenticator" and conf["authorizer"] == "CassandraAuthorizer"
    assert conf["listen_address"] == "cassandra" and conf["native_transport_port"] == 9042
    assert conf["data_file_directories"] == ["/var/lib/cassandra/data"]
    tls = conf["client_encryption_options"]
    assert tls["enabled"] is True and tls["optional"] is False and tls["keystore"] == "/certs/server.p12"
    jvm = COMPOSE["services"]["cassandra"]["environment"]["JVM_EXTRA_OPTS"]
    assert "-Dcassandra.config=file:///etc/workbench/cassandra.yaml" in jvm


def test_generated_ignite_xml_has_auth_and_ssl_at_container_paths(generated):
    settings, folder = generated
    xml = (folder / "ignite.xml").read_text()
    assert '<property name="authenticationEnabled" value="true"/>' in xml
    assert "/certs/server.p12" in xml and '<property name="sslEnabled" value="true"/>' in xml
    assert str(settings.state_dir) not in xml  # only container paths
    assert COMPOSE["services"]["ignite"]["environment"]["CONFIG_URI"] == "/etc/workbench/ignite.xml"


def test_generated_files_hold_no_login(generated):
    _, folder = generated
    logins = ["s3-secret-value-1", "cassandra-secret-1", "ignite-secret-1", "wb-key1"]
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert not any(login.encode() in text for login in logins), path


def test_tls_override_points_at_generated_certificates(generated):
    from cryptography import x509

    from workbench.stack.compose import SERVICE_HOSTS, TLS_FILES

    _, folder = generated
    flags = [f for f in TLS_OVERRIDE["services"]["triton"]["command"] if f.startswith("--grpc-")]
    assert "--grpc-use-ssl=true" in flags
    for flag in flags[1:]:
        assert flag.split("=", 1)[1].removeprefix("/certs/") in TLS_FILES
    cert = x509.load_pem_x509_certificate((folder / "certs" / "server.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert set(SERVICE_HOSTS) <= set(names)  # containers verify each other by service name
    assert "--certs-dir" in TLS_OVERRIDE["services"]["minio"]["command"]
