"""Apache Cassandra 5.0 from Maven Central's `cassandra-all`, single node, run from its jars."""

from __future__ import annotations

from workbench.clients import cassandra_session
from workbench.stack.java import java_command
from workbench.stack.provision import maven_fetch
from workbench.stack.service import Health, Launch, Service

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
# Image blobs are large: allow mutations and frames of a few MiB (the ingest checks a configurable limit).
commitlog_segment_size: 64MiB
native_transport_max_frame_size: 64MiB
batch_size_fail_threshold: 10MiB
"""

LOGBACK_XML = """\
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""


class Cassandra(Service):
    name = "cassandra"
    version = "5.0.6"
    startup_timeout_s = 180.0
    storage_port = 7000
    jmx_port = 7199

    def provision(self) -> None:
        maven_fetch(self.name, self.home, [f"org.apache.cassandra:cassandra-all:{self.version}"])

    def launch(self) -> Launch:
        conf = self.data_dir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        password_auth = bool(self.settings.cassandra_username and self.settings.cassandra_password)
        (conf / "cassandra.yaml").write_text(CASSANDRA_YAML.format(
            host=self.settings.host, storage_port=self.storage_port, native_port=self.settings.cassandra_port,
            data=self.data_dir,
            authenticator="PasswordAuthenticator" if password_auth else "AllowAllAuthenticator",
            authorizer="CassandraAuthorizer" if password_auth else "AllowAllAuthorizer",
        ))
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
            "cassandra.ring_delay_ms": "100",
            "cassandra.skip_wait_for_gossip_to_settle": "0",
            "jdk.attach.allowAttachSelf": "true",
        }
        command = java_command([conf, lib / "*"], "org.apache.cassandra.service.CassandraDaemon", "1G", props,
                               extra=[f"-javaagent:{jamm}", "-Xss512k"])
        return Launch(command, cwd=self.data_dir)

    def ports(self) -> dict[str, int]:
        return {"cql": self.settings.cassandra_port}

    def probe(self) -> Health:
        with cassandra_session(self.settings) as session:
            row = session.execute("SELECT release_version FROM system.local").one()
        return Health(True, version=row.release_version)
