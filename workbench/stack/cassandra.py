"""Apache Cassandra 5.0 from Maven Central's `cassandra-all`, single node, run from its jars.

With a configured login (`workbench init` always writes one) the node runs PasswordAuthenticator and
CassandraAuthorizer, and the health probe logs in with that login only. A node whose roles do not have
it yet (a fresh data dir, or one made earlier without authentication) is bootstrapped by the probe: it
logs in once with the server's built-in superuser cassandra/cassandra, creates the configured role
(SUPERUSER, LOGIN) and, from the new role's session, gives the built-in one a random password and
LOGIN = false, so the well-known login stops working. With settings.tls the native port speaks TLS only
(client_encryption_options, the stack's PKCS#12 keystore).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from workbench.clients import CassandraLoginRefused, cassandra_session
from workbench.config import DEFAULT_CREDENTIALS
from workbench.errors import WorkbenchError
from workbench.stack.java import java_command
from workbench.stack.provision import maven_fetch
from workbench.stack.service import Health, Launch, Service
from workbench.stack.tls import Certificates

CASSANDRA_YAML = """\
# Written by `workbench stack up`: a single-node Cassandra for benchmarks, data under the stack state dir.
cluster_name: workbench
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{host}:{storage_port}"
listen_address: {host}
rpc_address: {host}
storage_port: {storage_port}
native_transport_port: {native_port}
start_native_transport: true
endpoint_snitch: SimpleSnitch
data_file_directories: [{data}/data]
commitlog_directory: {data}/commitlog
saved_caches_directory: {data}/saved_caches
hints_directory: {data}/hints
cdc_raw_directory: {data}/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
authenticator: {authenticator}
authorizer: {authorizer}
role_manager: CassandraRoleManager
# Logins are rare (one per connection): no credentials cache, so a changed or disabled login takes effect at once.
credentials_validity: 0ms
# Image blobs are large: allow mutations and frames of a few MiB (the ingest checks a configurable limit).
commitlog_segment_size: 64MiB
native_transport_max_frame_size: 64MiB
batch_size_fail_threshold: 10MiB
"""

# TLS on the native (client) port only, never optional: a plain client is refused. No client certificates.
CLIENT_TLS_YAML = """\
client_encryption_options:
  enabled: true
  optional: false
  keystore: {keystore}
  keystore_password: "{password}"
  store_type: PKCS12
  require_client_auth: false
  accepted_protocols: [TLSv1.2, TLSv1.3]
"""

LOGBACK_XML = """\
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""

# How long after start-up the node creates its built-in superuser (default 10 s): the bootstrap waits on it.
SUPERUSER_SETUP_DELAY_MS = 500


class Cassandra(Service):
    name = "cassandra"
    version = "5.0.6"
    startup_timeout_s = 180.0

    def provision(self) -> None:
        maven_fetch(self.name, self.home, [f"org.apache.cassandra:cassandra-all:{self.version}"])

    def launch(self) -> Launch:
        conf = self.data_dir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        _write_private(conf / "cassandra.yaml", self.yaml())
        (conf / "logback.xml").write_text(LOGBACK_XML)
        lib = self.home / "lib"
        jamm = next(lib.glob("jamm-*.jar"))
        props = {
            "cassandra.config": f"file://{conf / 'cassandra.yaml'}",
            "logback.configurationFile": str(conf / "logback.xml"),
            "cassandra.storagedir": str(self.data_dir),
            "cassandra.logdir": str(self.data_dir / "logs"),
            "cassandra-foreground": "yes",
            "cassandra.jmx.local.port": str(self.settings.cassandra_jmx_port),
            "cassandra.ring_delay_ms": "100",
            "cassandra.skip_wait_for_gossip_to_settle": "0",
            "cassandra.superuser_setup_delay_ms": str(SUPERUSER_SETUP_DELAY_MS),
            "jdk.attach.allowAttachSelf": "true",
        }
        command = java_command([conf, lib / "*"], "org.apache.cassandra.service.CassandraDaemon", "1G", props,
                               extra=[f"-javaagent:{jamm}", "-Xss512k"])
        return Launch(command, cwd=self.data_dir)

    def yaml(self) -> str:
        """cassandra.yaml: authentication when a login is configured, client TLS when settings.tls."""
        s = self.settings
        text = CASSANDRA_YAML.format(
            host=s.host, storage_port=s.cassandra_storage_port, native_port=s.cassandra_port, data=self.data_dir,
            authenticator="PasswordAuthenticator" if self.password_auth else "AllowAllAuthenticator",
            authorizer="CassandraAuthorizer" if self.password_auth else "AllowAllAuthorizer",
        )
        if s.tls:
            certs = Certificates(s.certificates_dir())
            text += CLIENT_TLS_YAML.format(keystore=certs.keystore, password=certs.keystore_password())
        return text

    @property
    def password_auth(self) -> bool:
        return bool(self.settings.cassandra_username and self.settings.cassandra_password)

    def ports(self) -> dict[str, int]:
        return {"cql": self.settings.cassandra_port}

    def probe(self) -> Health:
        """A query with the configured login; a node that lacks that role yet is bootstrapped first."""
        try:
            return self._query_version()
        except CassandraLoginRefused:
            if not self.password_auth:
                raise
            self.bootstrap_login()
            return self._query_version()

    def _query_version(self) -> Health:
        with cassandra_session(self.settings) as session:
            row = session.execute("SELECT release_version FROM system.local").one()
        return Health(True, version=row.release_version)

    def bootstrap_login(self) -> None:
        """Create the configured superuser with the built-in login, then disable the built-in login.

        Idempotent and safe to repeat: every step tolerates a node where it already happened.
        """
        user = self.settings.cassandra_username
        password = self.settings.cassandra_password
        assert user is not None and password is not None
        builtin_user, builtin_password = DEFAULT_CREDENTIALS["cassandra"]
        role = _quote(user)
        try:
            with cassandra_session(self.settings, login=(builtin_user, builtin_password)) as session:
                if user == builtin_user:  # only its password changes (a superuser cannot demote itself)
                    session.execute(f"ALTER ROLE {role} WITH PASSWORD = %s", (password.get_secret_value(),))
                    return
                for verb in ("CREATE ROLE IF NOT EXISTS", "ALTER ROLE"):  # ALTER: a role left by an earlier run
                    session.execute(f"{verb} {role} WITH PASSWORD = %s AND SUPERUSER = true AND LOGIN = true",
                                    (password.get_secret_value(),))
        except CassandraLoginRefused:
            raise WorkbenchError(
                f"Cassandra at {self.address()} refuses the configured login '{user}' and the built-in one it is "
                f"created with (a node just started needs {SUPERUSER_SETUP_DELAY_MS} ms for that): if "
                f"{self.data_dir} was made with other credentials, put them back in .env, or remove that folder "
                "(its data is lost) and start again"
            ) from None
        with cassandra_session(self.settings) as session:
            session.execute(f"ALTER ROLE {_quote(builtin_user)} WITH PASSWORD = %s AND LOGIN = false",
                            (secrets.token_urlsafe(24),))


def _quote(identifier: str) -> str:
    """A CQL quoted identifier (role names may hold any character)."""
    return '"' + identifier.replace('"', '""') + '"'


def _write_private(path: Path, text: str) -> None:
    """Written mode 600 before any content: the yaml holds the keystore password when TLS is on."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)
