"""Apache Ignite 2.x from Maven Central, one in-memory node with the thin-client protocol on 10800."""

from __future__ import annotations

import shutil

from workbench.clients import ignite_client
from workbench.stack.java import java_command
from workbench.stack.provision import maven_fetch
from workbench.stack.service import Health, Launch, Service

IGNITE_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `workbench stack up`: one in-memory Ignite node bound to {host}. -->
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
                           http://www.springframework.org/schema/beans/spring-beans.xsd">
  <bean class="org.apache.ignite.configuration.IgniteConfiguration">
    <property name="igniteInstanceName" value="workbench"/>
    <property name="workDirectory" value="{data}/work"/>
    <property name="localHost" value="{host}"/>
    <!-- The health probe's cache is static: it starts with the node, so probing never creates a cache
         while the node's first partition exchange is still running (that race halted the node). -->
    <property name="cacheConfiguration">
      <list>
        <bean class="org.apache.ignite.configuration.CacheConfiguration">
          <property name="name" value="{health_cache}"/>
          <property name="cacheMode" value="REPLICATED"/>
        </bean>
      </list>
    </property>
    <property name="clientConnectorConfiguration">
      <bean class="org.apache.ignite.configuration.ClientConnectorConfiguration">
        <property name="host" value="{host}"/>
        <property name="port" value="{port}"/>
        <property name="portRange" value="0"/>
      </bean>
    </property>
    <property name="dataStorageConfiguration">
      <bean class="org.apache.ignite.configuration.DataStorageConfiguration">
        <property name="defaultDataRegionConfiguration">
          <bean class="org.apache.ignite.configuration.DataRegionConfiguration">
            <property name="name" value="default"/>
            <property name="maxSize" value="#{{4L * 1024 * 1024 * 1024}}"/>
          </bean>
        </property>
      </bean>
    </property>
    <property name="discoverySpi">
      <bean class="org.apache.ignite.spi.discovery.tcp.TcpDiscoverySpi">
        <property name="localAddress" value="{host}"/>
        <property name="localPort" value="47500"/>
        <property name="ipFinder">
          <bean class="org.apache.ignite.spi.discovery.tcp.ipfinder.vm.TcpDiscoveryVmIpFinder">
            <property name="addresses"><list><value>{host}:47500..47509</value></list></property>
          </bean>
        </property>
      </bean>
    </property>
    <property name="communicationSpi">
      <bean class="org.apache.ignite.spi.communication.tcp.TcpCommunicationSpi">
        <property name="localAddress" value="{host}"/>
      </bean>
    </property>
  </bean>
</beans>
"""


class Ignite(Service):
    name = "ignite"
    version = "2.17.0"
    health_cache = "workbench_health"

    def provision(self) -> None:
        maven_fetch(self.name, self.home, [
            f"org.apache.ignite:ignite-core:{self.version}",
            f"org.apache.ignite:ignite-spring:{self.version}",
            f"org.apache.ignite:ignite-indexing:{self.version}",
        ])

    def launch(self) -> Launch:
        # An in-memory node keeps nothing across restarts: every start begins with a clean work dir.
        shutil.rmtree(self.data_dir / "work", ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "ignite.xml"
        config.write_text(IGNITE_XML.format(host=self.settings.host, port=self.settings.ignite_port,
                                            data=self.data_dir, health_cache=self.health_cache))
        props = {
            "IGNITE_HOME": str(self.data_dir),
            "IGNITE_QUIET": "true",
            "IGNITE_NO_ASCII": "true",
            "IGNITE_UPDATE_NOTIFIER": "false",
            "IGNITE_PERFORMANCE_SUGGESTIONS_DISABLED": "true",
            "IGNITE_NO_SHUTDOWN_HOOK": "false",
        }
        command = java_command([self.home / "lib" / "*"], "org.apache.ignite.startup.cmdline.CommandLineStartup",
                               "1G", props, args=[str(config)])
        return Launch(command, cwd=self.data_dir)

    def ports(self) -> dict[str, int]:
        return {"thin": self.settings.ignite_port}

    def probe(self) -> Health:
        with ignite_client(self.settings) as client:
            cache = client.get_cache(self.health_cache)  # static (see the XML): never created by a probe
            cache.put("probe", b"ok")
            if cache.get("probe") != b"ok":
                return Health(False, detail="put/get returned a different value")
            version = ".".join(str(v) for v in client.protocol_context.version)
        return Health(True, version=f"{self.version} (thin protocol {version})")
