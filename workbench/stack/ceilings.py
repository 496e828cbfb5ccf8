"""The native ceiling programs (`ceilings/`): built once per source version into the cache, like MinIO.

Why compiled and separate: a backend's ceiling must be what the machine and the server give, not what
our Python costs, so it shares no code with our loaders. The Go programs (minio-go, gocql, plain file
reads) build through the Go module proxy from ``ceilings/go`` (go.mod/go.sum pin every module); the
Java program compiles against the ignite-core jars the stack already fetched for the Ignite server.
The cache folder's name carries a hash of the sources, so an edited program is rebuilt, never stale.
`workbench stack up` builds the ceilings of the services it provisions; `workbench.bench.native_ceilings`
builds the one it needs on first use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack.ignite import Ignite
from workbench.stack.provision import is_complete, mark_complete, require_tool, run_streamed

SOURCES = Path(__file__).resolve().parents[2] / "ceilings"
GO_PROGRAMS = {"s3": "s3-ceiling", "cassandra": "cassandra-ceiling", "fs": "fs-ceiling"}
JAVA_MAIN = "workbench.ceilings.IgniteCeiling"
# Which ceilings a service's provisioning builds (fs has no server: it comes with the Go ones).
OF_SERVICE = {"minio": "go", "cassandra": "go", "toxiproxy": "go", "ignite": "java"}


def _sources(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise WorkbenchError(f"the ceiling sources {folder} are missing: run from a checkout of the workbench "
                             "repository (pip install -e .)")
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in {".go", ".mod", ".sum", ".java"})


def _digest(folder: Path, extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for path in _sources(folder):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def go_home(settings: Settings) -> Path:
    return settings.cache_dir / f"ceilings-go-{_digest(SOURCES / 'go')}"


def go_program(settings: Settings, name: str) -> Path:
    """Path of a Go ceiling binary (`GO_PROGRAMS` value), built on first use."""
    home = go_home(settings)
    exe = home / "bin" / name
    if is_complete(home) and exe.exists():
        return exe
    go = require_tool("go")
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath -mod=readonly"}
    run_streamed("ceilings-go", [go, "build", "-o", str(home / "bin") + "/", "./cmd/..."], cwd=SOURCES / "go",
                 env=env, timeout_s=900)
    mark_complete(home)
    return exe


def ignite_lib(settings: Settings) -> Path:
    """The ignite-core jars of the stack's Ignite (fetched with Maven when the stack has not yet)."""

    ignite = Ignite(settings)
    if not is_complete(ignite.home):
        ignite.provision()
    return ignite.home / "lib"


def java_classpath(settings: Settings) -> list[Path]:
    """Classpath of the Java ceiling (its classes + the Ignite jars), compiled on first use."""

    lib = ignite_lib(settings)
    home = settings.cache_dir / f"ceilings-java-{_digest(SOURCES / 'java', Ignite.version)}"
    classes = home / "classes"
    if not is_complete(home):
        javac = require_tool("javac")
        shutil.rmtree(classes, ignore_errors=True)
        classes.mkdir(parents=True)
        run_streamed("ceilings-java", [javac, "-proc:none", "-cp", f"{lib}/*", "-d", str(classes),
                                       *map(str, _sources(SOURCES / "java"))], cwd=SOURCES / "java", timeout_s=300)
        mark_complete(home)
    return [classes, lib / "*"]


def provision_ceilings(settings: Settings, services: list[str]) -> None:
    """Build the ceilings of the provisioned `services`; a failure is one warning line, the stack still starts."""
    for kind in sorted({OF_SERVICE[s] for s in services if s in OF_SERVICE}):
        try:
            if kind == "go":
                go_program(settings, GO_PROGRAMS["s3"])
            else:
                java_classpath(settings)
        except WorkbenchError as exc:
            print(f"warning: native ceilings ({kind}) not built: {exc}", file=sys.stderr)
