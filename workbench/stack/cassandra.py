"""Apache Cassandra 5.0 from Maven Central's `cassandra-all`, run from its jars: one node or a ring of N.

A ring (settings.cassandra_nodes > 1) is N nodes on consecutive loopback addresses (`node_host(k)`, same
ports), one token each, balanced over the Murmur3 range and written into every node's yaml, so that no
node has to bootstrap (stream data) and all can start together; node 0 is the only seed. JMX listens on
127.0.0.1 whatever the node's address, so node k takes cassandra_jmx_port + k. A node is healthy once it
answers with the configured login and sees every node of the ring in its system tables with gossip status
NORMAL (no nodetool); a dead node shows as its own unhealthy row. Before the first node starts, the ring's
memory (heap + JVM overhead per node) is checked against MemAvailable, and a ring node refuses addresses
another server already holds (it could join that server's ring). With node_network=netns a node tells
clients its proxy's host-side address (broadcast_rpc_address), so clients through the proxies reach every
node there.

With a configured login (`workbench init` always writes one) the node runs PasswordAuthenticator and
CassandraAuthorizer, and the health probe logs in with that login only. A node whose roles do not have
it yet (a fresh data dir, or one made earlier without authentication) is bootstrapped by the probe: it
logs in once with the server's built-in superuser cassandra/cassandra, creates the configured role
(SUPERUSER, LOGIN) and, from the new role's session, gives the built-in one a random password and
LOGIN = false, so the well-known login stops working. With settings.tls the native port speaks TLS only
(client_encryption_options, the stack's PKCS#12 keystore); with settings.cassandra_client_auth as well it
requires client certificates signed by the stack's client CA (require_client_auth, the client truststore of
`ensure_client_certificates`), and the workbench's own clients present <tls_dir>/client.crt.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from workbench.clients import CassandraLoginRefused, cassandra_session
from workbench.clients.tls import client_auth_required
from workbench.config import DEFAULT_CREDENTIALS, Settings
from workbench.errors import WorkbenchError
from workbench.stack.java import java_command
from workbench.stack.process import ManagedProcess
from workbench.stack.provision import maven_fetch
from workbench.stack.service import Health, Launch, Service
from workbench.stack.tls import Certificates, ensure_client_certificates
from workbench.stack.topology_check import check_free, check_memory, wait_for_port

CASSANDRA_YAML = """\
# Written by `workbench stack up`: a Cassandra node for benchmarks, data under the stack state dir.
cluster_name: workbench
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seed}:{storage_port}"
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

# A ring node: its pre-assigned token, so a new ring starts without bootstrapping (nothing to stream yet).
RING_YAML = """\
initial_token: {token}
auto_bootstrap: false
"""

# A node in a network namespace (node_network=netns) tells clients the host-side address of its node, where
# its toxiproxy proxy listens: clients through the proxies then reach every node found in the ring there.
CLIENT_ADDRESS_YAML = """\
broadcast_rpc_address: {address}
"""

# TLS on the native (client) port only, never optional: a plain client is refused. Client certificates
# only with settings.cassandra_client_auth (CLIENT_AUTH_YAML follows).
CLIENT_TLS_YAML = """\
client_encryption_options:
  enabled: true
  optional: false
  keystore: {keystore}
  keystore_password: "{password}"
  store_type: PKCS12
  accepted_protocols: [TLSv1.2, TLSv1.3]
"""
CLIENT_AUTH_YAML = """\
  require_client_auth: {required}
"""
# require_client_auth checks a client's certificate against this truststore (the stack's client CA).
CLIENT_TRUSTSTORE_YAML = """\
  truststore: {truststore}
  truststore_password: "{password}"
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
# Heap per node (-Xms = -Xmx): a ring of three fits beside the rest of the stack on a 24 GiB machine.
SINGLE_HEAP_MIB = 1024
RING_HEAP_MIB = 768
# Resident memory beyond the heap (metaspace, code cache, thread stacks, direct buffers), measured here:
# a 1 GiB-heap node holds ~1.6 GiB, a 768 MiB one ~1.3 GiB after start-up and an ingest.
JVM_OVERHEAD_MIB = 640
# Start-up on two shared cores: a ring's nodes start together and compete for them.
SINGLE_STARTUP_S = 180.0
RING_STARTUP_S_PER_NODE = 120.0
MURMUR3_MIN = -(2**63)
JOIN_RING_DELAY_MS = 10_000
RING_RECORD = "ring.json"  # in node 0's folder: how many nodes the ring had when it first started


def ring_tokens(nodes: int) -> list[int]:
    """One Murmur3 token per node, evenly spaced over [-2^63, 2^63): every node owns 1/N of the ring."""
    return [MURMUR3_MIN + k * (2**64 // nodes) for k in range(nodes)]


class Cassandra(Service):
    name = "cassandra"
    version = "5.0.6"
    startup_timeout_s = SINGLE_STARTUP_S

    def __init__(self, settings: Settings, node: int = 0) -> None:
        super().__init__(settings, node)
        nodes = self.node_count(settings)
        if nodes > 1:  # several JVMs starting at once on a shared CPU
            self.startup_timeout_s = SINGLE_STARTUP_S + RING_STARTUP_S_PER_NODE * (nodes - 1)

    @classmethod
    def node_count(cls, settings: Settings) -> int:
        return settings.cassandra_nodes

    @property
    def ring(self) -> bool:
        return self.node_count(self.settings) > 1

    @property
    def heap_mib(self) -> int:
        return RING_HEAP_MIB if self.ring else SINGLE_HEAP_MIB

    @property
    def jmx_port(self) -> int:
        """JMX binds 127.0.0.1 whatever listen_address says: each node of a ring needs a port of its own."""
        return self.settings.cassandra_jmx_port + self.node

    def provision(self) -> None:
        maven_fetch(self.name, self.home, [f"org.apache.cassandra:cassandra-all:{self.version}"])

    def check_memory(self) -> None:
        """The first node to start checks that every node still to start fits in the free memory."""
        nodes = self.node_count(self.settings)
        waiting = [k for k in range(nodes) if k == self.node or Cassandra(self.settings, k).process().pid() is None]
        if waiting and waiting[0] == self.node:
            check_memory([(f"Cassandra node(s) ({self.heap_mib} MiB heap + {JVM_OVERHEAD_MIB} MiB JVM)",
                           len(waiting), self.heap_mib + JVM_OVERHEAD_MIB)],
                         hint="lower WORKBENCH_CASSANDRA_NODES or stop other servers")

    def process(self) -> ManagedProcess:
        return ManagedProcess(self.node_name, self.settings.state_dir / "run")

    @property
    def first_start(self) -> bool:
        """No data yet: the node has never run (or its folder was removed)."""
        return not (self.data_dir / "data" / "system").exists()

    def check_ring_size(self) -> None:
        """New nodes take their token ranges without streaming (auto_bootstrap false): right for a ring born
        with them, wrong for a grown one, whose data in those ranges would vanish from reads. Node 0 records
        the size the ring had when it first started; a new node beyond it is refused."""
        record = Cassandra(self.settings, 0).data_dir / RING_RECORD
        if self.node == 0:
            if self.first_start:
                record.parent.mkdir(parents=True, exist_ok=True)
                record.write_text(json.dumps({"nodes": self.node_count(self.settings)}) + "\n")
            return
        born = json.loads(record.read_text())["nodes"] if record.exists() else 1
        if self.first_start and self.node >= born:
            raise WorkbenchError(
                f"{self.node_name} would join a ring that started with {born} node(s) and holds data in "
                f"{record.parent}: a new node takes its share of the ring without streaming that data, so reads "
                "would miss it. Growing a ring is not supported: keep WORKBENCH_CASSANDRA_NODES="
                f"{born}, or `workbench stack down` and remove {self.settings.state_dir}/cassandra* (its data is "
                "lost) to start a new ring")

    def wait_for_seed(self) -> None:
        """A node other than the seed starts once the seed listens: it learns the ring from it (gossip's
        shadow round), and gives up after a few seconds when nobody answers."""
        seed = Cassandra(self.settings, 0)
        wait_for_port(seed.node_host, self.settings.cassandra_storage_port, self.startup_timeout_s,
                      lambda: seed.process().pid() is not None, f"the seed node {seed.node_name}",
                      f"{self.node_name} joins the ring through it; start it first (`workbench stack up cassandra`)")

    def launch(self) -> Launch:
        s = self.settings
        if self.ring:  # a ring node must never meet a foreign node at its addresses: it could join that ring
            check_free([(self.node_host, s.cassandra_port), (self.node_host, s.cassandra_storage_port),
                        ("127.0.0.1", self.jmx_port)], f"Cassandra node {self.node_name}")
        self.check_memory()
        self.check_ring_size()
        if self.node > 0:
            self.wait_for_seed()
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
            "cassandra.jmx.local.port": str(self.jmx_port),
            # How long a node waits on gossip: a joining node needs the seed's answer within it, the seed nobody's.
            "cassandra.ring_delay_ms": str(JOIN_RING_DELAY_MS if self.node > 0 else 100),
            "cassandra.skip_wait_for_gossip_to_settle": "0",
            "cassandra.superuser_setup_delay_ms": str(SUPERUSER_SETUP_DELAY_MS),
            "jdk.attach.allowAttachSelf": "true",
        }
        command = java_command([conf, lib / "*"], "org.apache.cassandra.service.CassandraDaemon", f"{self.heap_mib}M",
                               props,
                               extra=[f"-javaagent:{jamm}", "-Xss512k"])
        return Launch(command, cwd=self.data_dir)

    def yaml(self) -> str:
        """cassandra.yaml: authentication when a login is configured, client TLS when settings.tls."""
        s = self.settings
        text = CASSANDRA_YAML.format(
            host=self.node_host, storage_port=s.cassandra_storage_port, native_port=s.cassandra_port,
            data=self.data_dir, seed=s.node_host(0),
            authenticator="PasswordAuthenticator" if self.password_auth else "AllowAllAuthenticator",
            authorizer="CassandraAuthorizer" if self.password_auth else "AllowAllAuthorizer",
        )
        if self.ring:
            text += RING_YAML.format(token=ring_tokens(self.node_count(s))[self.node])
        if s.proxy_host(self.node) != self.node_host:
            text += CLIENT_ADDRESS_YAML.format(address=s.proxy_host(self.node))
        if s.tls:
            certs = Certificates(s.certificates_dir())
            text += CLIENT_TLS_YAML.format(keystore=certs.keystore, password=certs.keystore_password())
            required = client_auth_required(s)
            text += CLIENT_AUTH_YAML.format(required="true" if required else "false")
            if required:
                client = ensure_client_certificates(s)
                text += CLIENT_TRUSTSTORE_YAML.format(truststore=client.truststore, password=certs.keystore_password())
        return text

    @property
    def password_auth(self) -> bool:
        return bool(self.settings.cassandra_username and self.settings.cassandra_password)

    def ports(self) -> dict[str, int]:
        return {"cql": self.settings.cassandra_port}

    def probe(self) -> Health:
        """A query to this node only, with the configured login; in a ring the node must also see every node
        of the ring with gossip status NORMAL. A node that lacks the login yet is bootstrapped first: in a
        ring by node 0 alone, once the ring is complete."""
        try:
            return self._query_node()
        except CassandraLoginRefused:
            if not self.password_auth:
                raise
            if self.node > 0:
                return Health(False, detail=f"refuses the configured login: {self.name} (node 0) creates it once "
                                            "the ring is complete")
            self.bootstrap_login()
            return self._query_node()

    def _session(self, login: tuple[str, str] | None = None):
        """A session to this node alone (a probe must not be answered by another node of the ring)."""
        return cassandra_session(self.settings, login=login, node=self.node, schema_metadata_enabled=False,
                                 token_metadata_enabled=False)

    def _query_node(self) -> Health:
        with self._session() as session:
            row = session.execute("SELECT release_version FROM system.local").one()
            problem = self._ring_problem(session) if self.ring else ""
        nodes = self.node_count(self.settings)
        if problem:
            return Health(False, version=row.release_version, detail=problem)
        return Health(True, version=row.release_version, detail=f"ring of {nodes}: all NORMAL" if self.ring else "")

    def _ring_problem(self, session) -> str:
        """What this node's view of the ring lacks ('' when every node is a NORMAL member with a token)."""
        wanted = [self.settings.node_host(k) for k in range(self.node_count(self.settings))]
        local = session.execute("SELECT broadcast_address, tokens FROM system.local").one()
        members = {str(local.broadcast_address): local.tokens}
        members.update({str(r.peer): r.tokens for r in session.execute("SELECT peer, tokens FROM system.peers")})
        status = {str(r.address): (r.status_with_port or r.status or "").split(",")[0]
                  + ("" if r.rpc_ready == "true" else " (clients not served yet)")
                  for r in session.execute("SELECT address, status, status_with_port, rpc_ready "
                                           "FROM system_views.gossip_info")}
        missing = [h for h in wanted if not members.get(h)]
        unsettled = [f"{h} {status.get(h) or 'unknown'}" for h in wanted if status.get(h) != "NORMAL"]
        if not missing and not unsettled:
            return ""
        seen = sum(1 for h in wanted if members.get(h) and status.get(h) == "NORMAL")
        return (f"sees {seen} of {len(wanted)} ring nodes NORMAL"
                + (f"; not in its ring yet: {', '.join(missing)}" if missing else "")
                + (f"; gossip: {', '.join(unsettled)}" if unsettled else ""))

    def bootstrap_login(self) -> None:
        """Create the configured superuser with the built-in login, then disable the built-in login.

        In a ring, system_auth first gets a replica on up to three nodes (`_replicate_logins`).
        Idempotent and safe to repeat: every step tolerates a node where it already happened.
        """
        user = self.settings.cassandra_username
        password = self.settings.cassandra_password
        assert user is not None and password is not None
        builtin_user, builtin_password = DEFAULT_CREDENTIALS["cassandra"]
        role = _quote(user)
        try:
            with self._session(login=(builtin_user, builtin_password)) as session:
                if self.ring:
                    self._replicate_logins(session)
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
        with self._session() as session:
            session.execute(f"ALTER ROLE {_quote(builtin_user)} WITH PASSWORD = %s AND LOGIN = false",
                            (secrets.token_urlsafe(24),))


    def _replicate_logins(self, session) -> None:
        """system_auth on up to three nodes, so that logins survive a lost node; only on a complete ring.

        The built-in role was written while system_auth had one replica: a read of every role at ALL
        repairs it onto the new replicas (else a quorum read could miss it and its login never be disabled).
        """
        from cassandra import ConsistencyLevel
        from cassandra.query import SimpleStatement

        problem = self._ring_problem(session)
        if problem:
            raise WorkbenchError(f"waiting for the whole ring before creating the login: this node {problem}")
        replicas = min(3, self.node_count(self.settings))
        session.execute("ALTER KEYSPACE system_auth WITH replication = "
                        f"{{'class': 'SimpleStrategy', 'replication_factor': {replicas}}}")
        session.execute(SimpleStatement("SELECT role FROM system_auth.roles", consistency_level=ConsistencyLevel.ALL))


def _quote(identifier: str) -> str:
    """A CQL quoted identifier (role names may hold any character)."""
    return '"' + identifier.replace('"', '""') + '"'


def _write_private(path: Path, text: str) -> None:
    """Written mode 600 before any content: the yaml holds the keystore password when TLS is on."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)
