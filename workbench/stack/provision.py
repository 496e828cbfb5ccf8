"""Fetch server artifacts once into the cache: jars with Maven, binaries with the Go toolchain.

Everything comes from package registries (Maven Central, the Go module proxy), so a fresh machine
provisions itself; a second `stack up` finds the `.complete` marker and downloads nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from workbench.errors import WorkbenchError

TOOL_HINTS = {
    "java": "install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)",
    "javac": "install a JDK 17, not only a JRE (Debian: apt-get install openjdk-17-jdk-headless)",
    "mvn": "install Maven (Debian: apt-get install maven)",
    "go": "install Go >= 1.24 (https://go.dev/doc/install or Debian backports golang)",
}


def require_tool(tool: str) -> str:
    """Path of `tool`, or a one-line error naming it and how to get it."""
    path = shutil.which(tool)
    if path is None:
        raise WorkbenchError(f"'{tool}' is not on PATH: {TOOL_HINTS.get(tool, 'install it')}")
    return path


def is_complete(target: Path) -> bool:
    return (target / ".complete").exists()


def mark_complete(target: Path) -> None:
    (target / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def run_streamed(label: str, command: Sequence[str], cwd: Path, env: dict[str, str] | None = None,
                 timeout_s: float = 1800) -> None:
    """Run a provisioning command, echoing its progress lines with elapsed time; fail with its last lines."""
    start = time.monotonic()
    tail: list[str] = []
    proc = subprocess.Popen(
        list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-19:], line]
        print(f"  [{label} {time.monotonic() - start:5.0f}s] {line[:150]}", file=sys.stderr, flush=True)
        if time.monotonic() - start > timeout_s:
            proc.kill()
            raise WorkbenchError(f"provisioning {label} took over {timeout_s:.0f}s; see the lines above")
    if proc.wait() != 0:
        raise WorkbenchError(f"provisioning {label} failed (exit {proc.returncode}): {' | '.join(tail[-3:])}")


def maven_fetch(label: str, target: Path, artifacts: Sequence[str]) -> Path:
    """Copy `group:artifact:version` jars and their runtime dependencies into `target/lib`."""
    if is_complete(target):
        return target / "lib"
    mvn = require_tool("mvn")
    require_tool("java")
    target.mkdir(parents=True, exist_ok=True)
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in (coord.split(":") for coord in artifacts)
    )
    (target / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>workbench.stack</groupId><artifactId>{label}</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>\n"
    )
    run_streamed(label, [mvn, "-B", "-ntp", "dependency:copy-dependencies", "-DincludeScope=runtime",
                         "-DoutputDirectory=lib"], cwd=target)
    mark_complete(target)
    return target / "lib"


def go_install(label: str, target: Path, package: str, binary: str, ldflags: str = "") -> Path:
    """Build `package@version` from source through the Go module proxy; returns the binary's path."""
    exe = target / binary
    if is_complete(target) and exe.exists():
        return exe
    go = require_tool("go")
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(target / "gobin"), "CGO_ENABLED": "0", "GOFLAGS": "-trimpath"}
    run_streamed(label, [go, "install", "-v", f"-ldflags={ldflags}", package], cwd=target, env=env)
    built = next((target / "gobin").iterdir())
    built.replace(exe)
    mark_complete(target)
    return exe
