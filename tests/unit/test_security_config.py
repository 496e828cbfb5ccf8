"""Security without servers: default logins refused, generated credentials, the stack's TLS material,
the Cassandra/MinIO server configuration it feeds, and how TLS and login failures are explained."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import stat

import pytest
from credential_checks import check_first_credentials
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12
from pydantic import SecretStr

from workbench.config import DEFAULT_CREDENTIALS, Settings, ensure_credentials, get_settings
from workbench.errors import WorkbenchError
from workbench.loaders.retry import is_transient
from workbench.stack.tls import Certificates, ensure_certificates

CREDENTIAL_VARIABLES = ("S3_ACCESS_KEY", "S3_SECRET_KEY", "CASSANDRA_USERNAME", "CASSANDRA_PASSWORD",
                        "IGNITE_USERNAME", "IGNITE_PASSWORD")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No WORKBENCH_* credentials from the caller's environment, and a private working directory."""
    for name in (*CREDENTIAL_VARIABLES, "TLS", "DEV_MODE", "TLS_DIR", "TLS_CA_FILE", "HOST"):
        monkeypatch.delenv(f"WORKBENCH_{name}", raising=False)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _settings(tmp_path, **update) -> Settings:
    return Settings(_env_file=None, state_dir=tmp_path / "state", **update)


# ------------------------------------------------------------------------------ default credentials


@pytest.mark.parametrize("service", ["cassandra", "s3", "ignite"])
def test_each_default_login_is_refused_unless_dev_mode(clean_env, service):
    user, password = DEFAULT_CREDENTIALS[service]
    fields = {"cassandra": ("cassandra_username", "cassandra_password"), "s3": ("s3_access_key", "s3_secret_key"),
              "ignite": ("ignite_username", "ignite_password")}[service]
    values = {fields[0]: user, fields[1]: password}
    with pytest.raises(WorkbenchError, match=rf"{service} is configured with its well-known default.*DEV_MODE"):
        _settings(clean_env, **values).check_credentials()
    _settings(clean_env, dev_mode=True, **values).check_credentials()


def test_non_default_logins_and_no_logins_pass(clean_env):
    _settings(clean_env).check_credentials()
    _settings(clean_env, cassandra_username="cassandra", cassandra_password="x" * 20, s3_access_key="minioadmin",
              s3_secret_key="another-secret").check_credentials()


def test_minio_is_never_launched_with_minioadmin_unless_dev_mode(clean_env):
    from workbench.stack.minio import MinIO

    defaults = {"s3_access_key": "minioadmin", "s3_secret_key": "minioadmin"}
    with pytest.raises(WorkbenchError, match="well-known default"):
        MinIO(_settings(clean_env, **defaults)).launch()
    launch = MinIO(_settings(clean_env, dev_mode=True, **defaults)).launch()
    assert launch.env["MINIO_ROOT_USER"] == "minioadmin"
    assert "minioadmin" not in " ".join(launch.command)


# ------------------------------------------------------------------------------- ensure_credentials


def test_ensure_credentials_writes_every_login_once_into_a_private_file(clean_env):
    env = clean_env / ".env"
    written = check_first_credentials(env)
    settings = Settings(_env_file=env)
    assert settings.cassandra_username == "workbench" and settings.ignite_username == "workbench"
    for secret in (settings.cassandra_password, settings.ignite_password, settings.s3_secret_key):
        assert secret is not None and len(secret.get_secret_value()) >= 24
    settings.check_credentials()
    assert ensure_credentials(env) is False and env.read_text() == written


def test_ensure_credentials_keeps_configured_logins_and_completes_half_pairs(clean_env):
    env = clean_env / ".env"
    env.write_text("WORKBENCH_S3_ACCESS_KEY=mine\nWORKBENCH_S3_SECRET_KEY=my-secret\n"
                   "WORKBENCH_CASSANDRA_USERNAME=alice\n")
    assert ensure_credentials(env) is True
    settings = Settings(_env_file=env)
    assert settings.s3_credentials() == ("mine", "my-secret")
    assert settings.cassandra_username == "workbench" and settings.cassandra_password is not None
    assert env.read_text().count("WORKBENCH_CASSANDRA_USERNAME=") == 1


def test_generated_values_are_different_every_time(clean_env):
    first, second = clean_env / "a.env", clean_env / "b.env"
    ensure_credentials(first)
    ensure_credentials(second)
    a, b = Settings(_env_file=first), Settings(_env_file=second)
    assert a.cassandra_password.get_secret_value() != b.cassandra_password.get_secret_value()
    assert a.s3_access_key.get_secret_value() != b.s3_access_key.get_secret_value()


# ---------------------------------------------------------------------------------- TLS material


def test_certificates_are_a_ca_and_a_server_certificate_for_the_host(clean_env):
    settings = _settings(clean_env, tls=True)
    certs = ensure_certificates(settings)
    assert certs.complete() and certs.root == clean_env / "state" / "tls"
    assert stat.S_IMODE(certs.root.stat().st_mode) == 0o700
    for private in (certs.server_key, certs.keystore, certs.keystore_password_file):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    chain = x509.load_pem_x509_certificates(certs.server_cert.read_bytes())
    assert len(chain) == 2 and chain[1] == ca
    chain[0].verify_directly_issued_by(ca)
    names = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert chain[0].not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    assert settings.ca_file() == certs.ca_cert


def test_the_pkcs12_stores_open_with_the_keystore_password_only(clean_env):
    certs = ensure_certificates(_settings(clean_env, tls=True))
    password = certs.keystore_password().encode()
    key, cert, extra = pkcs12.load_key_and_certificates(certs.keystore.read_bytes(), password)
    assert key is not None and cert is not None and len(extra) == 1
    with pytest.raises(ValueError):
        pkcs12.load_key_and_certificates(certs.keystore.read_bytes(), b"wrong")
    trusted = pkcs12.load_pkcs12(certs.truststore.read_bytes(), password)
    assert trusted.key is None and len(trusted.additional_certs) == 1


def test_certificates_are_kept_and_renewed_for_another_host(clean_env):
    settings = _settings(clean_env, tls=True)
    first = ensure_certificates(settings).server_cert.read_bytes()
    assert ensure_certificates(settings).server_cert.read_bytes() == first
    other = settings.model_copy(update={"host": "10.1.2.3"})
    renewed = x509.load_pem_x509_certificate(ensure_certificates(other).server_cert.read_bytes())
    names = renewed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.1.2.3") in names.get_values_for_type(x509.IPAddress)


def test_tls_settings_change_endpoints_and_need_a_ca(clean_env):
    plain = _settings(clean_env)
    secure = plain.model_copy(update={"tls": True})
    assert plain.s3_endpoint() == "http://127.0.0.1:9000"
    assert secure.s3_endpoint(via_proxy=True) == "https://127.0.0.1:19000"
    with pytest.raises(WorkbenchError, match=r"CA file .* does not exist.*WORKBENCH_TLS_CA_FILE"):
        secure.ca_file()


def test_the_keystore_password_counts_as_a_secret(clean_env):
    settings = _settings(clean_env, tls=True)
    certs = ensure_certificates(settings)
    assert certs.keystore_password() in settings.secrets()


# ------------------------------------------------------------------------- server configuration


def test_cassandra_yaml_turns_on_auth_and_tls_only_client_encryption(clean_env):
    from workbench.stack.cassandra import Cassandra

    settings = _settings(clean_env, tls=True, cassandra_username="workbench", cassandra_password="pw" * 12,
                         cassandra_storage_port=7100, cassandra_jmx_port=7299)
    certs = ensure_certificates(settings)
    text = Cassandra(settings).yaml()
    assert "authenticator: PasswordAuthenticator" in text and "authorizer: CassandraAuthorizer" in text
    assert "storage_port: 7100" in text
    assert "enabled: true" in text and "optional: false" in text and "store_type: PKCS12" in text
    assert f"keystore: {certs.keystore}" in text and "pw" * 12 not in text
    plain = Cassandra(settings.model_copy(update={"tls": False, "cassandra_username": None})).yaml()
    assert "AllowAllAuthenticator" in plain and "client_encryption_options" not in plain


def test_cassandra_launch_uses_the_settings_ports_and_a_private_yaml(clean_env, monkeypatch):
    from workbench.stack import cassandra as module

    settings = _settings(clean_env, tls=True, cassandra_jmx_port=7299, cache_dir=clean_env / "cache")
    ensure_certificates(settings)
    lib = settings.cache_dir / f"cassandra-{module.Cassandra.version}" / "lib"
    lib.mkdir(parents=True)
    (lib / "jamm-0.4.0.jar").touch()
    monkeypatch.setattr(module, "java_command", lambda cp, main, heap, props, extra: [f"-D{k}={v}" for k, v in
                                                                                     props.items()])
    command = module.Cassandra(settings).launch().command
    assert "-Dcassandra.jmx.local.port=7299" in command
    assert any(c.startswith("-Dcassandra.superuser_setup_delay_ms=") for c in command)
    yaml = settings.state_dir / "cassandra" / "conf" / "cassandra.yaml"
    assert stat.S_IMODE(yaml.stat().st_mode) == 0o600
    assert Certificates(settings.certificates_dir()).keystore_password() not in " ".join(command)


def test_minio_gets_a_certs_dir_with_the_server_pair_and_the_ca(clean_env):
    from workbench.stack.minio import MinIO

    settings = _settings(clean_env, tls=True, s3_access_key="wb-key", s3_secret_key="s" * 24)
    certs = ensure_certificates(settings)
    command = MinIO(settings).launch().command
    folder = settings.state_dir / "minio" / "certs"
    assert command[command.index("--certs-dir") + 1] == str(folder)
    assert (folder / "public.crt").read_bytes() == certs.server_cert.read_bytes()
    assert (folder / "CAs" / "ca.crt").read_bytes() == certs.ca_cert.read_bytes()
    assert stat.S_IMODE((folder / "private.key").stat().st_mode) == 0o600
    assert "--certs-dir" not in MinIO(settings.model_copy(update={"tls": False})).launch().command


# ------------------------------------------------------------------------------ clients and loaders


def test_clients_trust_only_the_stack_ca_and_check_the_host(clean_env):
    import ssl

    from workbench.clients import cassandra_ssl_context
    from workbench.storage import s3_client

    settings = _settings(clean_env, tls=True, s3_access_key="wb-key", s3_secret_key="s" * 24)
    ensure_certificates(settings)
    context = cassandra_ssl_context(settings)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert cassandra_ssl_context(settings.model_copy(update={"tls": False})) is None
    client = s3_client(settings)
    assert client.meta.endpoint_url == "https://127.0.0.1:9000"
    assert client._endpoint.http_session._verify == str(settings.ca_file())


def test_the_cassandra_loader_defaults_to_the_stacks_tls(clean_env):
    from workbench.clients.cassandra_connection import ssl_context, tls_of
    from workbench.loaders.cassandra_config import CassandraConfig

    settings = _settings(clean_env, tls=True)
    ensure_certificates(settings)
    ca = str(settings.ca_file())
    assert tls_of(settings, CassandraConfig(dataset="d")) == (True, ca)
    assert ssl_context(settings, CassandraConfig(dataset="d")).check_hostname
    assert tls_of(settings, CassandraConfig(dataset="d", use_ssl=False)) == (False, None)
    assert tls_of(settings.model_copy(update={"tls": False}), CassandraConfig(dataset="d")) == (False, None)
    explicit = CassandraConfig(dataset="d", use_ssl=True, ssl_certificate=ca)
    assert tls_of(settings, explicit) == (True, ca) and not ssl_context(settings, explicit).check_hostname
    with pytest.raises(ValueError, match="need use_ssl=True"):
        CassandraConfig(dataset="d", ssl_certificate=ca)


def test_the_plugin_gets_the_stack_ca_when_tls_is_left_to_settings(clean_env):
    from workbench.layouts.cassandra_tables import Layout
    from workbench.loaders.cassandra_plugin import CassandraPluginConfig, CassandraPluginLoader

    settings = _settings(clean_env, tls=True, cassandra_username="workbench", cassandra_password="pw" * 12)
    ensure_certificates(settings)
    loader = CassandraPluginLoader.__new__(CassandraPluginLoader)  # the plugin itself does not load here
    loader.settings, loader.config = settings, CassandraPluginConfig(dataset="d")
    loader._layout = Layout("ks", "data_train", "id", "label", "data", "ks.metadata_train", "int")
    arguments = loader.reader_arguments(["00000000-0000-0000-0000-000000000001"])
    assert arguments["use_ssl"] is True and arguments["ssl_certificate"] == str(settings.ca_file())
    assert arguments["username"] == "workbench" and arguments["password"] == "pw" * 12
    # fn.crs4.cassandra refuses to build without username/password, even for a node without auth
    anonymous = _settings(clean_env, cassandra_username="", cassandra_password="")
    loader.settings = anonymous
    arguments = loader.reader_arguments(["00000000-0000-0000-0000-000000000001"])
    assert arguments["username"] == "" and arguments["password"] == "" and arguments["use_ssl"] is False


def _no_host_available(error: BaseException):
    from cassandra.cluster import NoHostAvailable

    return NoHostAvailable("Unable to connect to any servers", {"127.0.0.1:9042": error})


def test_cassandra_failures_become_one_clear_line(clean_env):
    from cassandra import AuthenticationFailed

    from workbench.clients import CassandraLoginRefused, cassandra_error

    refused = cassandra_error(_no_host_available(AuthenticationFailed(
        'Failed to authenticate: code=0100 [Bad credentials] message="Provided username x and/or password are '
        'incorrect"')), "127.0.0.1:9042", tls=False, timeout_s=1)
    assert isinstance(refused, CassandraLoginRefused) and not is_transient(refused)
    assert "127.0.0.1:9042 refused the login (Provided username x" in str(refused)
    untrusted = cassandra_error(_no_host_available(OSError(1, "Tried connecting to [('127.0.0.1', 9042)]. Last error: "
                                "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate "
                                "(_ssl.c:1006)")), "127.0.0.1:9042", tls=True, timeout_s=1)
    assert "cannot verify the TLS certificate" in str(untrusted) and "self-signed certificate" in str(untrusted)
    assert not is_transient(untrusted)
    down = cassandra_error(_no_host_available(ConnectionRefusedError(111, "Connection refused")), "127.0.0.1:9042",
                           tls=False, timeout_s=1)
    assert str(down).startswith("cannot reach Cassandra at 127.0.0.1:9042") and is_transient(down)


def test_s3_tls_failures_become_one_clear_permanent_line():
    from botocore.exceptions import SSLError

    from workbench.storage.s3 import _S3TLSErrors

    handler = _S3TLSErrors("https://127.0.0.1:9000", 1.0)
    for text, expected in (
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate "
         "(_ssl.c:1006)", "cannot verify the TLS certificate of S3 at https://127.0.0.1:9000 (unable to get local"),
        ("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)", "(WRONG_VERSION_NUMBER): the server does "
                                                                           "not speak TLS"),
    ):
        with pytest.raises(WorkbenchError, match=expected.replace("(", r"\(").replace(")", r"\)")) as caught:
            handler(exception=SSLError(endpoint_url="https://127.0.0.1:9000", error=text))
        assert not is_transient(caught.value)
    handler(exception=None)  # nothing to say about a call that did not fail


def test_the_peer_trust_bundle_holds_the_system_cas_and_the_stack_ca(clean_env, monkeypatch):
    from workbench.loaders.peers import trust_bundle, trust_stack_ca

    settings = _settings(clean_env, tls=True)
    certs = ensure_certificates(settings)
    bundle = trust_bundle(settings)
    text = bundle.read_text()
    assert certs.ca_cert.read_text().strip() in text and text.count("BEGIN CERTIFICATE") > 1
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    trust_stack_ca(settings.model_copy(update={"tls": False}), "CURL_CA_BUNDLE")
    assert "CURL_CA_BUNDLE" not in os.environ
    trust_stack_ca(settings, "CURL_CA_BUNDLE")
    assert os.environ["CURL_CA_BUNDLE"] == str(bundle)
    assert trust_bundle(settings).read_bytes() == bundle.read_bytes()  # stable, not growing


def test_secret_str_values_never_show_in_settings_repr(clean_env):
    settings = _settings(clean_env, cassandra_password=SecretStr("hunter2-long-password"))
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
