"""Apache Ignite 2.x from Maven Central: thin-client protocol on 10800, caches in memory or persisted.

A cluster of WORKBENCH_IGNITE_NODES server nodes: node k binds its own address (`Settings.node_host`) with
the usual ports, its consistent id is its node name (`ignite`, `ignite-2`, ...: a restarted node keeps its
place in the baseline topology) and its static IP finder lists every node's discovery address, nothing
else, so it never joins another cluster (the main stack's, a test's). The cluster is activated by node 0's
probe once every node has joined, so a persistent cluster's baseline topology is all of them.

With WORKBENCH_IGNITE_PERSISTENCE=1 the default data region is persistent (Ignite native persistence): the
work folder is kept across restarts and caches survive a node restart, a crash (write-ahead log) and `stack
down` + `stack up`; the users too, so the login is the one of the first start (another one: remove the
nodes' folders). A restart that takes every copy of some partitions away (backups=0 on several nodes) leaves
them "lost" until the whole cluster restarts: resetting lost partitions needs Ignite's control script, which
the thin client has no request for. Without persistence every start begins with an empty work folder.

With a configured login (`workbench init` writes one) the node runs with authentication. Ignite 2.x
enables authentication only when some data region is persistent, so the node gets one small persistent
region that no cache uses (it only turns on the persistent metastore where Ignite keeps its users);
without WORKBENCH_IGNITE_PERSISTENCE the caches stay in the in-memory default region. A fresh node of
this kind starts inactive and knows one user, the well-known ``ignite`` superuser: the first probe logs in
with it once to activate the cluster, create the configured user and give ``ignite`` a random password
nobody keeps, so afterwards only the configured login works (see `retire_default_login`). Such a fresh cluster
starts node 0 alone: the others are launched once it accepts the default login (`Ignite.joinable`).

With settings.tls the thin-client connector speaks TLS only, with the stack's PKCS#12 keystore; the
keystore password is read by the node from ``keystore.pass`` (mode 600), never written into the XML. With
settings.ignite_client_auth as well the connector requires a client certificate (sslClientAuth) signed by
the stack's client CA (`workbench.stack.tls.ensure_client_certificates`), and the workbench's own clients
present <tls_dir>/client.crt.

Partitions: the thin-client protocol cannot send an affinity function, so the node configuration carries
cache templates (the Ignite article's way): a cache created by a name starting ``WB_P<n>_B<b>_`` gets
``RendezvousAffinityFunction(false, n)`` and b backups, for n a power of two from 1 to 32768 (see
`workbench.clients.ignite.partition_template`; SQL tables take the same template with ``template=``).
Discovery and communication bind the node's own address (explicit localAddress, no port range), so
clusters on other addresses or ports (the main stack on 127.0.0.1, a private test cluster) never meet.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from xml.sax.saxutils import escape

from pydantic import SecretStr

from workbench.clients.ignite import (
    PARTITION_TEMPLATES,
    ignite_client,
    ignite_client_auth,
    partition_template,
    server_node_count,
    template_backups,
)
from workbench.config import DEFAULT_CREDENTIALS, Settings
from workbench.errors import WorkbenchError
from workbench.stack.java import java_command
from workbench.stack.provision import maven_fetch
from workbench.stack.service import Health, Launch, Service
from workbench.stack.tls import Certificates, ClientCertificates, ensure_client_certificates

DEFAULT_USER, DEFAULT_PASSWORD = DEFAULT_CREDENTIALS["ignite"]
BOOTSTRAP_PENDING = "bootstrap-pending"  # written at launch, removed once the default login is retired

IGNITE_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `workbench stack up`: one Ignite node bound to {host}. -->
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
                           http://www.springframework.org/schema/beans/spring-beans.xsd">
  <bean class="org.apache.ignite.configuration.IgniteConfiguration">
    <property name="igniteInstanceName" value="workbench"/>
    <property name="consistentId" value="{consistent_id}"/>
    <property name="workDirectory" value="{work}"/>
    <property name="localHost" value="{host}"/>
{authentication}    <!-- The health probe's cache is static: it starts with the node, so probing never creates a cache
         while the node's first partition exchange is still running (that race halted the node). -->
    <property name="cacheConfiguration">
      <list>
        <bean class="org.apache.ignite.configuration.CacheConfiguration">
          <property name="name" value="{health_cache}"/>
          <property name="cacheMode" value="REPLICATED"/>
        </bean>
{templates}      </list>
    </property>
    <!-- No legacy TCP connector (11211): clients use the thin-client connector only. -->
    <property name="connectorConfiguration"><null/></property>
    <property name="clientConnectorConfiguration">
      <bean class="org.apache.ignite.configuration.ClientConnectorConfiguration">
        <property name="host" value="{host}"/>
        <property name="port" value="{port}"/>
        <property name="portRange" value="0"/>
{ssl}      </bean>
    </property>
    <property name="dataStorageConfiguration">
      <bean class="org.apache.ignite.configuration.DataStorageConfiguration">
        <property name="defaultDataRegionConfiguration">
          <bean class="org.apache.ignite.configuration.DataRegionConfiguration">
            <property name="name" value="default"/>
            <property name="maxSize" value="#{{4L * 1024 * 1024 * 1024}}"/>
            <property name="persistenceEnabled" value="{persistent}"/>
          </bean>
        </property>
{persistence}      </bean>
    </property>
    <property name="discoverySpi">
      <bean class="org.apache.ignite.spi.discovery.tcp.TcpDiscoverySpi">
        <property name="localAddress" value="{host}"/>
        <property name="localPort" value="{discovery_port}"/>
        <property name="localPortRange" value="0"/>
        <property name="ipFinder">
          <bean class="org.apache.ignite.spi.discovery.tcp.ipfinder.vm.TcpDiscoveryVmIpFinder">
            <property name="addresses"><list>{members}</list></property>
          </bean>
        </property>
      </bean>
    </property>
    <property name="communicationSpi">
      <bean class="org.apache.ignite.spi.communication.tcp.TcpCommunicationSpi">
        <property name="localAddress" value="{host}"/>
        <property name="localPort" value="{communication_port}"/>
        <property name="localPortRange" value="0"/>
      </bean>
    </property>
  </bean>
</beans>
"""

AUTHENTICATION_XML = """\
    <!-- Authentication needs a persistent region (see dataStorageConfiguration). Such a cluster starts
         inactive (clusterStateOnStart does not apply to it): the stack's bootstrap activates it. -->
    <property name="authenticationEnabled" value="true"/>
    <!-- No SQL query history: it would keep the text of CREATE/ALTER USER, passwords included, readable by
         any user in SYS.SQL_QUERIES_HISTORY (Ignite's user statements take no bind parameters). -->
    <property name="sqlConfiguration">
      <bean class="org.apache.ignite.configuration.SqlConfiguration">
        <property name="sqlQueryHistorySize" value="0"/>
      </bean>
    </property>
"""

# A tiny persistent region no cache uses: it only switches on the persistent metastore (Ignite's users).
AUTH_REGION_XML = """\
        <property name="dataRegionConfigurations">
          <list>
            <bean class="org.apache.ignite.configuration.DataRegionConfiguration">
              <property name="name" value="workbench_auth"/>
              <property name="persistenceEnabled" value="true"/>
              <property name="initialSize" value="#{{32L * 1024 * 1024}}"/>
              <property name="maxSize" value="#{{32L * 1024 * 1024}}"/>
            </bean>
          </list>
        </property>
"""

# Write-ahead log of whatever is persistent. Only the metastore: it writes a few KB, so 4 MB segments (the
# default, 10 x 64 MB, would preallocate 640 MB). Caches too: 4 x 64 MB, the archive kept under 512 MB.
WAL_XML = """\
        <property name="walSegments" value="4"/>
        <property name="walSegmentSize" value="#{{{segment_mb} * 1024 * 1024}}"/>
        <property name="maxWalArchiveSize" value="#{{{archive_mb}L * 1024 * 1024}}"/>
"""

# Thin-client TLS with its own context factory; the keystore password is read from its file at start. With
# client authentication the trust store holds the CA of client certificates (`ensure_client_certificates`).
SSL_XML = """\
        <property name="sslEnabled" value="true"/>
        <property name="useIgniteSslContextFactory" value="false"/>
        <property name="sslClientAuth" value="{client_auth}"/>
        <property name="sslContextFactory">
          <bean class="org.apache.ignite.ssl.SslContextFactory">
            <property name="keyStoreFilePath" value="{keystore}"/>
            <property name="keyStoreType" value="PKCS12"/>
            <property name="keyStorePassword" value="{password}"/>
            <property name="trustStoreFilePath" value="{truststore}"/>
            <property name="trustStoreType" value="PKCS12"/>
            <property name="trustStorePassword" value="{password}"/>
            <property name="protocols"><list><value>TLSv1.3</value><value>TLSv1.2</value></list></property>
          </bean>
        </property>
"""


# One cache template: a cache created by name with the template's prefix gets its partitions and backups.
TEMPLATE_XML = """\
        <bean class="org.apache.ignite.configuration.CacheConfiguration">
          <property name="name" value="{prefix}*"/>
          <property name="cacheMode" value="PARTITIONED"/>
          <property name="backups" value="{backups}"/>
          <property name="affinity">
            <bean class="org.apache.ignite.cache.affinity.rendezvous.RendezvousAffinityFunction">
              <constructor-arg value="false"/>
              <constructor-arg value="{partitions}"/>
            </bean>
          </property>
        </bean>
"""


def templates_xml(settings: Settings) -> str:
    """The partition templates (`workbench.clients.ignite.partition_template`): every partition count of
    PARTITION_TEMPLATES with every backup count this cluster can use. Templates are configurations only: no
    cache exists until a client creates one by a name with the template's prefix."""
    return "".join(TEMPLATE_XML.format(prefix=partition_template(n, b), backups=b, partitions=n)
                   for n in PARTITION_TEMPLATES for b in template_backups(settings))


def _path(path: Path) -> str:
    """A path as an XML attribute value."""
    return escape(str(path), {'"': "&quot;"})


def _read_file_expression(path: Path) -> str:
    """A Spring expression the node evaluates to the (stripped) content of `path`: the secret stays in its file."""
    literal = str(path).replace("'", "''")
    return escape(f"#{{T(java.nio.file.Files).readString(T(java.nio.file.Path).of('{literal}')).strip()}}",
                  {'"': "&quot;"})


def ignite_xml(settings: Settings, data_dir: Path, health_cache: str, authentication: bool, node: int = 0,
               nodes: int = 1) -> str:
    """The Spring configuration of node `node` of `nodes` (authentication, persistence and TLS sections only
    when configured)."""
    ssl = ""
    if settings.tls:
        certs = Certificates(settings.certificates_dir())
        client_auth = ignite_client_auth(settings)
        truststore = ClientCertificates(certs.root).truststore if client_auth else certs.truststore
        ssl = SSL_XML.format(keystore=_path(certs.keystore), truststore=_path(truststore),
                             password=_read_file_expression(certs.keystore_password_file),
                             client_auth=str(client_auth).lower())
    persistence = AUTH_REGION_XML.format() if authentication else ""
    if settings.ignite_persistence:
        persistence += WAL_XML.format(segment_mb=64, archive_mb=512)
    elif authentication:
        persistence += WAL_XML.format(segment_mb=4, archive_mb=64)
    members = "".join(f"<value>{settings.node_host(k)}:{settings.ignite_discovery_port}</value>"
                      for k in range(nodes))
    return IGNITE_XML.format(
        host=settings.node_host(node), port=settings.ignite_port, work=_path(data_dir / "work"),
        health_cache=health_cache, consistent_id=Ignite(settings, node).node_name, members=members,
        discovery_port=settings.ignite_discovery_port, communication_port=settings.ignite_communication_port,
        authentication=AUTHENTICATION_XML if authentication else "", persistence=persistence,
        persistent=str(settings.ignite_persistence).lower(), ssl=ssl, templates=templates_xml(settings),
    )


# The JVM heap of a node. The data live off-heap (the default region, above); the heap holds what is in flight: a
# single node at 1 GiB died of "Java heap space" under `bench loaders` (28 get_all of 64 x 110 KB values in
# flight, after a day of test caches), so a node alone gets 2 GiB; a node of a cluster on one machine keeps 1.
SINGLE_HEAP, CLUSTER_HEAP = "2G", "1G"


class Ignite(Service):
    name = "ignite"
    version = "2.17.0"
    health_cache = "workbench_health"

    @property
    def authentication(self) -> bool:
        """Authentication is on whenever a login is configured (`workbench init` always writes one)."""
        return bool(self.settings.ignite_username and self.settings.ignite_password)

    @classmethod
    def node_count(cls, settings: Settings) -> int:
        return settings.ignite_nodes

    def provision(self) -> None:
        maven_fetch(self.name, self.home, [
            f"org.apache.ignite:ignite-core:{self.version}",
            f"org.apache.ignite:ignite-spring:{self.version}",
            f"org.apache.ignite:ignite-indexing:{self.version}",
        ])

    def launch(self) -> Launch:
        # Without native persistence nothing is kept across restarts (the persistent region holds only the
        # users): every start begins with a clean work dir, so the login is bootstrapped again (`bootstrap`).
        # With it the work dir is the data: kept, and so are the users.
        work = self.data_dir / "work"
        if not self.settings.ignite_persistence:
            shutil.rmtree(work, ignore_errors=True)
        fresh = not work.exists()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if ignite_client_auth(self.settings):
            ensure_client_certificates(self.settings)  # the trust store of client certificates, and the stack's own
        config = self.data_dir / "ignite.xml"
        config.touch(mode=0o600, exist_ok=True)
        config.chmod(0o600)
        config.write_text(ignite_xml(self.settings, self.data_dir, self.health_cache, self.authentication,
                                     self.node, self.node_count(self.settings)))
        pending = self.data_dir / BOOTSTRAP_PENDING  # the cluster's login is node 0's to bootstrap
        if self.authentication and self.node == 0 and fresh:
            pending.touch()
        elif not self.authentication:
            pending.unlink(missing_ok=True)
        props = {
            "IGNITE_HOME": str(self.data_dir),
            "IGNITE_QUIET": "true",
            "IGNITE_NO_ASCII": "true",
            "IGNITE_UPDATE_NOTIFIER": "false",
            "IGNITE_PERFORMANCE_SUGGESTIONS_DISABLED": "true",
            "IGNITE_NO_SHUTDOWN_HOOK": "false",
            "IGNITE_TO_STRING_INCLUDE_SENSITIVE": "false",  # no key/value contents in the node's log
        }
        heap = SINGLE_HEAP if self.node_count(self.settings) == 1 else CLUSTER_HEAP
        command = java_command([self.home / "lib" / "*"], "org.apache.ignite.startup.cmdline.CommandLineStartup",
                               heap, props, args=[str(config)])
        return Launch(command, cwd=self.data_dir)

    def ports(self) -> dict[str, int]:
        s = self.settings
        return {"thin": s.ignite_port, "discovery": s.ignite_discovery_port,
                "communication": s.ignite_communication_port}

    def probe(self) -> Health:
        """A put/get on this node with the configured login. Node 0 first retires the default login of a
        fresh cluster and activates it once every node has joined (`activate`)."""
        if self.authentication:
            if self.node == 0:
                self.bootstrap()
            if self._accepts_anonymous():
                return Health(False, detail="the node runs without authentication (started before a login was "
                                            "configured): `workbench stack down ignite && workbench stack up ignite`")
        with ignite_client(self.settings, node=self.node) as client:
            if self.node == 0:
                activate(client, self.node_count(self.settings))
            cache = client.get_cache(self.health_cache)  # static (see the XML): never created by a probe
            cache.put("probe", b"ok")
            if cache.get("probe") != b"ok":
                return Health(False, detail="put/get returned a different value")
            version = ".".join(str(v) for v in client.protocol_context.version)
        return Health(True, version=f"{self.version} (thin protocol {version})")

    def joinable(self) -> bool:
        """A fresh cluster with a login: once node 0 knows the default user. Ignite 2.17 hands a joining node
        the coordinator's users; a node that joins a coordinator which has not created its default user yet
        gets none, and halts at the first request made as that user (the activation: "Failed to find security
        context for subject with given ID", seen in CI with two nodes started together). So node 0 starts
        alone, becomes the coordinator, and the others join once its default login (or, already retired,
        ours) gets in."""
        if not self.authentication or not (self.data_dir / BOOTSTRAP_PENDING).exists():
            return True
        try:
            return self._connects(default_login(self.settings), refused="refused the login") or self._logs_in()
        except WorkbenchError:
            return False  # not listening yet

    def _accepts_anonymous(self) -> bool:
        """True when a client without a login gets in (a node started without authentication)."""
        anonymous = self.settings.model_copy(update={"ignite_username": None, "ignite_password": None})
        return self._connects(anonymous, refused="requires a login")

    def bootstrap(self) -> None:
        """Once per start of a node with authentication: `retire_default_login` (the marker says it is due).

        A compose node is started by docker, not by us, so no marker exists: there every probe tries the
        default login, which costs one refused handshake once the login has been retired.
        """
        pending = self.data_dir / BOOTSTRAP_PENDING
        # Done once the default login is retired, or refused while ours works. A fresh node can refuse the
        # default login for a moment (seen once while a second node joined, the cluster still inactive): then
        # the marker stays, and the next probe tries again.
        due = pending.exists() or self.settings.stack != "local"
        if due and (retire_default_login(self.settings) or self._logs_in()):
            pending.unlink(missing_ok=True)

    def _logs_in(self) -> bool:
        """Whether this node accepts the configured login."""
        return self._connects(self.settings, refused="refused the login")

    def _connects(self, settings: Settings, refused: str) -> bool:
        """Whether a client with `settings` gets into this node: False when the error says `refused`; any other
        failure is raised."""
        try:
            with ignite_client(settings, node=self.node):
                return True
        except WorkbenchError as exc:
            if refused in str(exc):
                return False
            raise


def retire_default_login(settings: Settings) -> bool:
    """As the default superuser of a fresh node: activate the cluster, create the configured user, then give
    the default user a random password nobody keeps. Returns False when the default login is refused already.

    Idempotent (a user that exists gets its password set). For any node with authentication: the local
    stack runs it at each start; a compose stack can run it once its Ignite is up.
    """
    user = settings.ignite_username
    password = settings.ignite_password.get_secret_value() if settings.ignite_password else ""
    if (user, password) == (DEFAULT_USER, DEFAULT_PASSWORD):  # dev_mode asked for the default login
        return False
    if not user or '"' in user or len(user.encode()) > 60:  # Ignite's limit; the name is quoted in SQL
        raise WorkbenchError(f"WORKBENCH_IGNITE_USERNAME {user!r} is not a valid Ignite user name: use at most "
                             "60 bytes and no double quote")
    try:
        with ignite_client(default_login(settings)) as client:
            activate(client, settings.ignite_nodes if settings.stack == "local" else 1)
            _set_login(client, user, password)
            if user != DEFAULT_USER:
                _alter_user(client, DEFAULT_USER, secrets.token_urlsafe(24))  # kept nowhere
    except WorkbenchError as exc:
        if "refused the login" in str(exc):
            return False
        raise  # e.g. not up yet: the next probe tries again
    return True


def default_login(settings: Settings) -> Settings:
    """`settings` with the default superuser's well-known login, which a fresh node accepts."""
    return settings.model_copy(update={
        "ignite_username": DEFAULT_USER, "ignite_password": SecretStr(DEFAULT_PASSWORD), "dev_mode": True})


def activate(client, nodes: int) -> None:
    """Activate an inactive cluster once `nodes` server nodes have joined it: the first activation of a
    persistent cluster makes the nodes present its baseline topology, so it must not happen earlier.
    (A persistent cluster whose baseline nodes all rejoin after a restart activates itself.)"""
    from pyignite.datatypes import ClusterState

    cluster = client.get_cluster()
    if cluster.get_state() == ClusterState.ACTIVE:
        return
    joined = server_node_count(client)
    if joined < nodes:
        raise WorkbenchError(f"{joined} of {nodes} Ignite nodes have joined the cluster: activating it once all have")
    cluster.set_state(ClusterState.ACTIVE)


def _quoted(password: str) -> str:
    """An SQL string literal."""
    return "'" + password.replace("'", "''") + "'"


def _run(client, statement: str, secret: str) -> None:
    """Run one user-management statement; an error never repeats the statement (it holds `secret`)."""
    from pyignite.exceptions import SQLError

    try:
        with client.sql(statement) as cursor:
            list(cursor)
    except SQLError as exc:
        reason = str(exc).replace(secret.replace("'", "''"), "***").replace(secret, "***").splitlines()[0][:200]
        raise WorkbenchError(f"Ignite: {' '.join(statement.split()[:3])} ... failed: {reason}") from None


def _alter_user(client, user: str, password: str) -> None:
    _run(client, f'ALTER USER "{user}" WITH PASSWORD {_quoted(password)}', password)


def _set_login(client, user: str, password: str) -> None:
    """Create `user` with `password`, or set its password when it exists already."""
    if user == DEFAULT_USER:
        _alter_user(client, user, password)
        return
    try:
        _run(client, f'CREATE USER "{user}" WITH PASSWORD {_quoted(password)}', password)
    except WorkbenchError as exc:
        if "already exists" not in str(exc):
            raise
        _alter_user(client, user, password)
