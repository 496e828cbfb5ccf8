"""JVM command lines for the Java servers (Cassandra, Ignite) on Java 17."""

from __future__ import annotations

from pathlib import Path

from workbench.stack.provision import require_tool

# Java 17 hides JDK internals that Cassandra and Ignite still reach into; these flags open them.
OPENS = [
    "java.base/java.io", "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.module",
    "java.base/java.lang.reflect", "java.base/java.math", "java.base/java.net", "java.base/java.nio",
    "java.base/java.text", "java.base/java.time", "java.base/java.util", "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic", "java.base/java.util.concurrent.locks",
    "java.base/jdk.internal.access", "java.base/jdk.internal.loader", "java.base/jdk.internal.math",
    "java.base/jdk.internal.misc", "java.base/jdk.internal.module", "java.base/jdk.internal.ref",
    "java.base/jdk.internal.reflect", "java.base/jdk.internal.util.jar", "java.base/sun.nio.ch",
    "java.base/sun.reflect.generics.reflectiveObjects", "java.base/sun.util.calendar",
    "java.management/com.sun.jmx.mbeanserver", "java.management/sun.management", "java.sql/java.sql",
    "jdk.internal.jvmstat/sun.jvmstat.monitor", "jdk.management/com.sun.management.internal",
]
EXPORTS = [
    "java.base/jdk.internal.misc", "java.base/jdk.internal.ref", "java.base/sun.nio.ch",
    "java.management.rmi/com.sun.jmx.remote.internal.rmi", "java.rmi/sun.rmi.registry",
    "java.rmi/sun.rmi.server", "java.sql/java.sql",
]


def java_command(classpath: list[Path], main: str, heap: str, props: dict[str, str],
                 extra: list[str] | None = None, args: list[str] | None = None) -> list[str]:
    """`java` with a fixed heap, the Java 17 module flags, system properties and a classpath."""
    command = [require_tool("java"), f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.net.preferIPv4Stack=true"]
    command += [f"--add-opens={m}=ALL-UNNAMED" for m in OPENS]
    command += [f"--add-exports={m}=ALL-UNNAMED" for m in EXPORTS]
    command += [f"-D{k}={v}" for k, v in props.items()]
    command += extra or []
    command += ["-cp", ":".join(str(p) for p in classpath), main]
    return command + (args or [])
