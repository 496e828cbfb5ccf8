"""Each backend's ceiling, measured by a compiled program that shares no code with our loaders.

Why: a Python loop as the "raw ceiling" costs what our loaders cost, so loaders beat their own ceiling
and the benchmark measures Python. These programs (`ceilings/`, built by `workbench.stack.ceilings`)
read exactly the layout our backends write, located through the catalog like the loaders find it, at
the same concurrency and through the same toxiproxy port when `via_proxy`:

| backend | program |
| --- | --- |
| s3-objects, s3-shards | Go, minio-go v7: manifest.txt / index.json, then GETs, N goroutines (shards: tars parsed) |
| cassandra | Go, gocql: ids from metadata_<split>, prepared single-partition SELECTs of data_<split>, N goroutines |
| ignite | Java thin client (ignite-core): ids from <CACHE>_IDS, getAll batches of binary objects, N threads |
| fs | Go, os.ReadFile / tar reads, N goroutines |

In a cluster (`stack up --nodes N`, or an external cluster's endpoint lists) each program gets every node, as
the loaders do: gocql every contact point (through each node's proxy when `via_proxy`, without peer discovery:
the nodes advertise addresses that are not their proxies), minio-go every S3 endpoint in turn (any node serves
any object), the Ignite client thread i node i mod N.

Each prints one JSON line: samples, bytes (the images, as the backend's `scan` counts them), wire bytes,
seconds (the reads, after connecting), and the program's own CPU seconds (user+sys) in that time, of its timed
pass over the split: `warmup` untimed passes come first (default 1), as a loader kept from epoch to epoch
(`bench loaders`) reads its timed epochs with connections open, the servers' caches warm and its code loaded.
The split is listed once, before the passes (`list_seconds`), as a loader lists it in its first epoch and
keeps the list: with `warmup` 0 the listing is in the timed pass, as in a loader's first epoch.
With `digest` (`run_native_ceiling(..., digest=True)`, the programs' -digest / --digest true) a program reads the
split once more after its timed pass, untimed, and prints "sha256 <hex> <key as a JSON string>" per sample of
that pass before its result line: the SHA-256 of the image bytes, keyed by the sample's id (cassandra, ignite:
the row's or cache entry's key; shards: the tar's "uid" member) or, for one object per sample, its manifest key
(relative to the split). Off, no program hashes anything; on, the figures are still the timed pass's.
Credentials go to the program in environment variables, never on its command line, and never appear in
an error (they are scrubbed from its output). Every request has settings.timeout_s; the whole run is
bounded by `run_timeout_s`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from workbench.backends import BACKENDS, backend_class, locate
from workbench.clients.endpoints import cassandra_hosts, ignite_points, where
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack.ceilings import GO_PROGRAMS, JAVA_MAIN, go_program, java_classpath
from workbench.stack.java import java_command

RUN_TIMEOUT_S = 600.0


class CeilingConfig(BaseModel):
    """What a ceiling needs of a loader config (the bench passes the loader's; other fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    dataset: str = Field(..., min_length=1)
    split: str = "train"
    concurrency: int = Field(16, ge=1, le=1024)
    via_proxy: bool = False
    io_threads: int = Field(2, ge=1, le=32, description="cassandra: connections (as the cassandra loader's)")
    get_batch: int = Field(64, ge=1, le=100_000, description="ignite: keys per getAll (as the ignite loader's)")
    warmup: int = Field(1, ge=0, le=10, description="untimed passes over the split before the timed one: open "
                        "connections, warm caches and (Java) compiled code, as a loader kept from epoch to epoch has")


@dataclass(frozen=True)
class CeilingRun:
    """One run of a ceiling program."""

    program: str
    samples: int
    bytes: int
    wire_bytes: int
    seconds: float
    list_seconds: float
    connect_seconds: float
    cpu_s: float
    digests: dict[str, str] | None = None  # key -> SHA-256 hex of each sample read (run with digest=True)

    @property
    def counts(self) -> tuple[int, int]:
        return self.samples, self.bytes


@dataclass(frozen=True)
class _Command:
    argv: list[str]
    env: dict[str, str]


DIGEST_PREFIX = "sha256 "
_HEX64 = re.compile(r"[0-9a-f]{64}")
_DIGEST_FLAG = {"go": ["-digest"], "java": ["--digest", "true"]}


def sample_digest(data: bytes) -> str:
    """The digest a ceiling prints of one sample's bytes (SHA-256: every language's standard library has it)."""
    return hashlib.sha256(data).hexdigest()


def parse_digests(stdout: str) -> dict[str, str]:
    """key -> digest of a ceiling's "sha256 <hex> <JSON key>" lines; a malformed or repeated key is one line."""
    digests: dict[str, str] = {}
    for number, line in enumerate(stdout.splitlines(), 1):
        if not line.startswith(DIGEST_PREFIX):
            continue
        value, _, raw_key = line[len(DIGEST_PREFIX):].partition(" ")
        try:
            key = json.loads(raw_key)
        except ValueError:
            key = None
        if not _HEX64.fullmatch(value) or not isinstance(key, str):
            raise WorkbenchError(f"ceiling digest line {number} is not 'sha256 <64 hex> <JSON string key>': "
                                 f"{line[:120]!r}; rebuild the ceilings")
        if key in digests:
            raise WorkbenchError(f"ceiling digest line {number}: key {key!r} was read twice in one pass")
        digests[key] = value
    return digests


def digest_mismatches(got: dict[str, str], expected: dict[str, str]) -> list[str]:
    """Where two key -> digest maps differ, one line per key (missing, unexpected or other bytes); [] when equal."""
    lines = [f"missing {k}" for k in sorted(expected.keys() - got.keys())]
    lines += [f"unexpected {k}" for k in sorted(got.keys() - expected.keys())]
    lines += [f"{k}: read {got[k][:12]}, expected {expected[k][:12]}"
              for k in sorted(got.keys() & expected.keys()) if got[k] != expected[k]]
    return lines


def native_backends() -> list[str]:
    """Registered backends whose descriptor names a ceiling program."""
    return [name for name in BACKENDS if backend_class(name).native_ceiling is not None]


def _program(backend: str) -> str:
    """The ceiling program key of `backend` (its descriptor's `native_ceiling`), or one line listing who has one."""
    key = backend_class(backend).native_ceiling if backend in BACKENDS else None
    if key not in PROGRAMS:
        raise WorkbenchError(f"no native ceiling for backend '{backend}': use one of {', '.join(native_backends())}")
    return key


def program_name(backend: str) -> str:
    """The ceiling program of a backend, for result rows ("go/minio-go shards", "go/gocql", ...)."""
    label = PROGRAMS[_program(backend)][0]
    return f"{label} {'shards' if backend_class(backend).sharded else 'objects'}" if label == "go/minio-go" else label


def _base_env() -> dict[str, str]:
    """The child's environment: just enough to run (no inherited WORKBENCH_* secrets)."""
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "JAVA_HOME", "LANG", "TMPDIR")}


def _tls_flags(settings: Settings, style: str) -> list[str]:
    if not settings.tls:
        return []
    ca = str(settings.ca_file())
    return ["-tls", "-ca", ca] if style == "go" else ["--tls", "true", "--ca", ca]


def _entry(settings: Settings, backend: str, config: CeilingConfig) -> dict:
    """Where the dataset lives, as the loaders find it: the catalog, or the backend's default layout."""
    return locate(settings, backend, config.dataset)


def s3_addresses(settings: Settings, via_proxy: bool) -> list[str]:
    """host:port of every S3 endpoint the ceiling reads through: an external cluster's list, else every MinIO node
    (through its proxy when `via_proxy`)."""
    if settings.s3_endpoints:
        return [urlsplit(url.strip()).netloc for url in settings.s3_endpoints]
    host = settings.proxy_host if via_proxy else settings.node_host
    return [f"{host(k)}:{settings.port('s3', via_proxy)}" for k in range(settings.nodes_of("s3"))]


def _s3(settings: Settings, backend: str, c: CeilingConfig) -> _Command:
    entry = _entry(settings, backend, c)
    access, secret = settings.s3_credentials()
    argv = [str(go_program(settings, GO_PROGRAMS["s3"])),
            "-endpoint", ",".join(s3_addresses(settings, c.via_proxy)), "-region", settings.s3_region,
            "-bucket", entry.get("bucket") or settings.s3_bucket, "-prefix", entry.get("prefix") or "",
            "-split", c.split, "-layout", "shards" if backend_class(backend).sharded else "objects",
            "-concurrency", str(c.concurrency), "-warmup", str(c.warmup), "-timeout", str(settings.timeout_s),
            *_tls_flags(settings, "go")]
    return _Command(argv, {**_base_env(), "CEILING_ACCESS_KEY": access, "CEILING_SECRET_KEY": secret})


def _cassandra(settings: Settings, backend: str, c: CeilingConfig) -> _Command:
    entry = _entry(settings, backend, c)
    tables, metadata = entry.get("tables") or {}, entry.get("metadata_tables") or {}
    if c.split not in tables or c.split not in metadata:
        raise WorkbenchError(
            f"dataset '{c.dataset}' has no split '{c.split}' in Cassandra (splits: {', '.join(tables) or 'none'}): "
            "ingest it with `workbench ingest --backend cassandra`, or pick another split"
        )
    columns = entry.get("columns") or {}
    settings.check_credentials()
    env = _base_env()
    if settings.cassandra_username and settings.cassandra_password:
        env |= {"CEILING_USERNAME": settings.cassandra_username,
                "CEILING_PASSWORD": settings.cassandra_password.get_secret_value()}
    hosts, port = cassandra_hosts(settings, c.via_proxy)
    argv = [str(go_program(settings, GO_PROGRAMS["cassandra"])), "-host", ",".join(hosts),
            "-port", str(port), "-data-table", tables[c.split],
            "-metadata-table", metadata[c.split], "-id-col", columns.get("id") or "id",
            "-data-col", columns.get("data") or "data", "-concurrency", str(c.concurrency),
            "-conns", str(c.io_threads), "-warmup", str(c.warmup), "-timeout", str(settings.timeout_s),
            *_tls_flags(settings, "go")]
    return _Command(argv, env)


def _ignite(settings: Settings, backend: str, c: CeilingConfig) -> _Command:
    entry = _entry(settings, backend, c)
    if entry.get("mode", "binary") != "binary":
        raise WorkbenchError(f"the Ignite ceiling reads binary-mode caches; dataset '{c.dataset}' is in "
                             f"{entry.get('mode')} mode (ingest with -o mode=binary)")
    settings.check_credentials()
    env = _base_env()
    if settings.ignite_username and settings.ignite_password:
        env |= {"CEILING_USERNAME": settings.ignite_username,
                "CEILING_PASSWORD": settings.ignite_password.get_secret_value()}
    args = ["--addresses", where(ignite_points(settings, c.via_proxy)).replace(" ", ""), "--cache", entry["cache"],
            "--split", c.split, "--concurrency", str(c.concurrency), "--batch", str(c.get_batch),
            "--warmup", str(c.warmup), "--timeout", str(settings.timeout_s), *_tls_flags(settings, "java")]
    argv = java_command(java_classpath(settings), JAVA_MAIN, heap="512m", props={}, args=args)
    return _Command(argv, env)


def _fs(settings: Settings, backend: str, c: CeilingConfig) -> _Command:
    entry = _entry(settings, backend, c)
    argv = [str(go_program(settings, GO_PROGRAMS["fs"])), "-root", str(Path(entry["root"])), "-split", c.split,
            "-layout", entry.get("layout") or "imagefolder", "-concurrency", str(c.concurrency),
            "-warmup", str(c.warmup)]
    return _Command(argv, _base_env())


# Ceiling program key (a backend descriptor's `native_ceiling`) -> (its name in result rows, its command line).
PROGRAMS: dict[str, tuple[str, Callable[[Settings, str, CeilingConfig], _Command]]] = {
    "gocql": ("go/gocql", _cassandra),
    "minio-go": ("go/minio-go", _s3),
    "ignite-thin-client": ("java/ignite-thin-client", _ignite),
    "os": ("go/os", _fs),
}


def command_for(settings: Settings, backend: str, config: CeilingConfig) -> _Command:
    """The program's command line and environment (builds the program on first use)."""
    return PROGRAMS[_program(backend)][1](settings, backend, config)


def _scrub(text: str, settings: Settings) -> str:
    for secret in settings.secrets():
        if secret:
            text = text.replace(secret, "***")
    return text


def run_native_ceiling(settings: Settings, backend: str, config: CeilingConfig | dict,
                       run_timeout_s: float = RUN_TIMEOUT_S, digest: bool = False) -> CeilingRun:
    """Run the backend's ceiling program once over the dataset's split; its counts, times and CPU.

    `digest`: also every sample's digest (`CeilingRun.digests`), from one more, untimed, pass (see the module doc).
    """
    c = config if isinstance(config, CeilingConfig) else CeilingConfig(**config)
    command = command_for(settings, backend, c)
    name = program_name(backend)
    argv = command.argv + (_DIGEST_FLAG[name.split("/", 1)[0]] if digest else [])
    try:
        proc = subprocess.run(argv, env=command.env, capture_output=True, text=True, timeout=run_timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise WorkbenchError(
            f"the {backend} ceiling ({name}) ran over {run_timeout_s:.0f}s on dataset '{c.dataset}' and was "
            "stopped: a smaller dataset, or a larger run_timeout_s"
        ) from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        reason = _scrub(lines[-1] if lines else f"exit status {proc.returncode}", settings)
        raise WorkbenchError(f"the {backend} ceiling ({name}) failed: {reason}")
    try:
        doc = json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))
        run = CeilingRun(program=name, samples=int(doc["samples"]), bytes=int(doc["bytes"]),
                         wire_bytes=int(doc["wire_bytes"]), seconds=float(doc["seconds"]),
                         list_seconds=float(doc["list_seconds"]), connect_seconds=float(doc["connect_seconds"]),
                         cpu_s=float(doc["cpu_s"]))
    except (StopIteration, ValueError, KeyError, TypeError) as exc:
        raise WorkbenchError(f"the {backend} ceiling ({name}) printed no result line ({type(exc).__name__}); "
                             f"rebuild it by removing {settings.cache_dir}/ceilings-*") from None
    return dataclasses.replace(run, digests=parse_digests(proc.stdout)) if digest else run


# ----------------------------------------------------------------------------------- for the benchmark


def native_ceiling_run(settings: Settings, backend: str, config: dict, cpu: list[float]) -> tuple[float, int, int]:
    """One timed run for `workbench bench loaders`: (seconds, samples, bytes); appends the program's CPU seconds.

    seconds are the program's own (its timed pass's reads, after connecting and listing): neither the process
    start (a JVM), the connect nor the listing, which a loader does in its first epoch only, is a cost of its
    later epochs' reading.
    """
    run = run_native_ceiling(settings, backend, config)
    cpu.append(run.cpu_s)
    return run.seconds, run.samples, run.bytes


def cpu_columns(results: list[tuple[float, int, int]], cpu: list[float]) -> dict[str, float]:
    """Client CPU per sample (µs) and per MB (ms), medians over the repeats (NaN when nothing was read)."""
    per_sample = [c / s * 1e6 for c, (_, s, _) in zip(cpu, results, strict=True) if s]
    per_mb = [c * 1e3 / (b / 1e6) for c, (_, _, b) in zip(cpu, results, strict=True) if b]
    return {"cpu_us_per_sample": statistics.median(per_sample) if per_sample else math.nan,
            "cpu_ms_per_mb": statistics.median(per_mb) if per_mb else math.nan}
