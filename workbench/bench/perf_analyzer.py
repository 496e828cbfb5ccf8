"""Triton's own load generator, `perf_analyzer`, swept over concurrency x batch size against our models.

Why beside our inference sweep (`workbench.bench.inference`): perf_analyzer is the tool Triton users quote,
and it reports what ours cannot see: the server's side of each request (queue, compute input/infer/output)
next to the client's (send, network + server, receive) and its latency percentiles, each point measured
until stable. Its input is the real dataset, not random bytes: `input_data` turns samples read with a
registered loader (the encoded images, for ``ensemble``) or their UUIDs (for ``cass_to_inference``, whose
server reads Cassandra itself) into perf_analyzer's ``--input-data`` JSON, in the wire format of
`workbench.serving` (`pack_images`, `pack_uuids`). perf_analyzer sends the entries round-robin, `-b` of
them per request, so every entry has the same shape: image rows are zero-padded to the longest sample
read, as `pack_images` pads a batch.

The binary: ``WORKBENCH_PERF_ANALYZER``, else the copy `install_perf_analyzer` unpacked into the venv
(``<venv>/perf_analyzer``), else ``perf_analyzer`` on PATH (PyPI's ``perf-analyzer`` wheel, which needs
glibc 2.38). `install_perf_analyzer` takes it from the last tritonclient wheel that bundled it and still
runs on glibc 2.36 (2.51.0), with the two libraries it links (libcudart.so.12 from PyPI's
nvidia-cuda-runtime-cu12, libb64.so.0d from Debian's libb64-0d), so no system package is installed.
"""

from __future__ import annotations

import base64
import csv
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.bench.inference import DEFAULT_RESULTS, check_grid, check_loader, list_keys
from workbench.clients.endpoints import triton_address, where
from workbench.config import Settings
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError, first_line
from workbench.loaders import make_loader
from workbench.results import check_writable, write_atomically, write_results
from workbench.serving import cassandra_table, check_protocol, input_kind, pack_images, pack_uuids

ENV_BINARY = "WORKBENCH_PERF_ANALYZER"
TOOL_DIR = Path(sys.prefix) / "perf_analyzer"  # install_perf_analyzer's copy: inside the venv, so git-ignored
BUNDLING_TRITONCLIENT = "2.51.0"  # the last tritonclient wheel whose perf_analyzer needs no glibc 2.38
MODES = ("count_windows", "time_windows")
RAW_DIR = "perf_analyzer"  # perf_analyzer's own CSV of every point, beside the tidy rows

# ------------------------------------------------------------------------------------ the binary


@dataclass(frozen=True)
class Binary:
    """A perf_analyzer that runs here: its path, the environment it needs (library path) and its version."""

    path: Path
    env: dict[str, str]
    version: str

    def run(self, args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([str(self.path), *args], env=self.env, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise WorkbenchError(f"perf_analyzer did not finish within {timeout_s:.0f} s "
                                 f"({' '.join(args[:6])} ...): lower the measurement or raise the timeout") from exc


def _candidates() -> list[tuple[Path, list[Path]]]:
    """(binary, library folders) in the order they are tried."""
    found: list[tuple[Path, list[Path]]] = []
    if os.environ.get(ENV_BINARY):
        path = Path(os.environ[ENV_BINARY]).expanduser()
        found.append((path, [path.parent.parent / "lib"]))
    found.append((TOOL_DIR / "bin" / "perf_analyzer", [TOOL_DIR / "lib"]))
    for path in (Path(sys.executable).parent / "perf_analyzer", shutil.which("perf_analyzer")):
        if path:
            found.append((Path(path), []))
    return found


def find_perf_analyzer() -> Binary:
    """The first perf_analyzer that starts here (`--version`), or one WorkbenchError line saying why none does."""
    tried = []
    for path, libs in _candidates():
        if not path.is_file():
            continue
        env = dict(os.environ)
        extra = [str(lib) for lib in libs if lib.is_dir()]
        if extra:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*extra, *filter(None, [env.get("LD_LIBRARY_PATH")])])
        try:
            done = subprocess.run([str(path), "--version"], env=env, capture_output=True, text=True, timeout=30,
                                  check=False)
        except OSError as exc:
            tried.append(f"{path}: {exc.strerror or exc}")
            continue
        except subprocess.TimeoutExpired:
            tried.append(f"{path}: no answer to --version within 30 s")
            continue
        text = (done.stdout + done.stderr).strip()
        version = re.search(r"Perf Analyzer Version (\S+)", text)
        if version:
            return Binary(path, env, version.group(1))
        tried.append(f"{path}: {first_line(text) or f'exit {done.returncode}'}")
    detail = "; ".join(tried) if tried else "none found"
    raise WorkbenchError(f"no perf_analyzer runs here ({detail}): run `workbench inference perf-install` (or set "
                         f"{ENV_BINARY} to a perf_analyzer binary)")


def _pip(*args: str, timeout_s: float = 600) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    if done.returncode:
        raise WorkbenchError(f"pip {' '.join(args[:2])} failed: {first_line(done.stderr or done.stdout)}")


def install_perf_analyzer(dest: Path = TOOL_DIR, tritonclient_version: str = BUNDLING_TRITONCLIENT) -> Binary:
    """Unpack perf_analyzer and the libraries it links into `dest` (bin/, lib/), without touching the system.

    Why not `pip install perf-analyzer`: its wheels are tagged manylinux_2_38 (glibc 2.38, GCC 13's libstdc++),
    so pip refuses them on Debian 12 / glibc 2.36 and falls back to a 0.1.0 placeholder without a binary.
    tritonclient's wheels bundled the binary up to 2.53; 2.51.0 is the last built against glibc <= 2.34.
    """
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "bin").mkdir(exist_ok=True)
    (dest / "lib").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        wheels = Path(tmp)
        common = ("download", "--no-deps", "--only-binary=:all:", "-d", str(wheels))
        _pip(*common, "--platform", "manylinux1_x86_64", f"tritonclient=={tritonclient_version}")
        _pip(*common, "nvidia-cuda-runtime-cu12")
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    target = None
                    if name.endswith("/bin/perf_analyzer"):
                        target = dest / "bin" / "perf_analyzer"
                    elif re.search(r"/libcudart\.so\.12$", name):
                        target = dest / "lib" / "libcudart.so.12"
                    if target is not None:
                        target.write_bytes(archive.read(name))
                        target.chmod(0o755)
        if not (dest / "lib" / "libb64.so.0d").exists():
            _libb64(wheels, dest / "lib")
    if not (dest / "bin" / "perf_analyzer").exists():
        raise WorkbenchError(f"tritonclient {tritonclient_version} has no perf_analyzer: pass a version <= 2.53")
    os.environ[ENV_BINARY] = str(dest / "bin" / "perf_analyzer")
    return find_perf_analyzer()


def _libb64(tmp: Path, lib: Path) -> None:
    """libb64.so.0d from the distribution's package, unpacked (no root, nothing installed system-wide)."""
    system = Path("/usr/lib/x86_64-linux-gnu/libb64.so.0d")
    if system.exists():
        return
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise WorkbenchError("perf_analyzer links libb64.so.0d: install your distribution's libb64 package "
                             "(Debian/Ubuntu: libb64-0d)")
    got = subprocess.run(["apt-get", "download", "libb64-0d"], cwd=tmp, capture_output=True, text=True, timeout=300,
                         check=False)
    debs = list(tmp.glob("libb64-0d_*.deb"))
    if not debs:
        raise WorkbenchError(f"apt-get download libb64-0d failed: {first_line(got.stderr)}")
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tmp / "deb")], check=True, timeout=60)
    for so in (tmp / "deb").rglob("libb64.so.0d"):
        shutil.copyfile(so, lib / "libb64.so.0d")


# ------------------------------------------------------------------------------------ input data


def input_data(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """perf_analyzer's ``--input-data`` JSON from batched request tensors (`pack_images` / `pack_uuids`): one
    entry per row, each tensor as little-endian base64 content with its per-sample shape."""
    if not arrays:
        raise WorkbenchError("no tensors to turn into perf_analyzer input data")
    rows = {len(array) for array in arrays.values()}
    if len(rows) != 1 or 0 in rows:
        raise WorkbenchError(f"request tensors with different or no rows: {sorted(rows)}")
    entries = []
    for i in range(rows.pop()):
        entry = {}
        for name, array in arrays.items():
            row = np.ascontiguousarray(array[i]).astype(array.dtype.newbyteorder("<"), copy=False)
            entry[name] = {"content": {"b64": base64.b64encode(row.tobytes()).decode("ascii")},
                           "shape": list(row.shape)}
        entries.append(entry)
    return {"data": entries}


def read_samples(settings: Settings, model: str, loader_name: str, dataset: str, count: int,
                 **loader_options: Any) -> dict[str, np.ndarray]:
    """Up to `count` samples of the dataset as the model's request tensors: the encoded bytes read with the
    loader (``ensemble``), or the keys it yields (``cass_to_inference``, whose server reads the bytes)."""
    if input_kind(model) == "uuid":
        return pack_uuids(list_keys(settings, loader_name, dataset, limit=count, **loader_options))
    blobs: list[bytes] = []
    with make_loader(loader_name, settings, dataset=dataset, **loader_options) as loader:
        for item in itertools.islice(loader, count):
            blobs.append(item.data)
    if not blobs:
        raise WorkbenchError(f"loader {loader_name} found no samples of dataset '{dataset}': ingest it first")
    return pack_images(blobs)


# ------------------------------------------------------------------------------------ its CSV

# perf_analyzer's CSV column -> our tidy name; times are microseconds there, milliseconds here
_COLUMNS = {
    "Concurrency": "concurrency",
    "Inferences/Second": "inferences_per_s",
    "Client Send": "client_send_ms",
    "Network+Server Send/Recv": "network_server_send_recv_ms",
    "Server Queue": "server_queue_ms",
    "Server Compute Input": "server_compute_input_ms",
    "Server Compute Infer": "server_compute_infer_ms",
    "Server Compute Output": "server_compute_output_ms",
    "Client Recv": "client_recv_ms",
    "p50 latency": "latency_ms_p50",
    "p90 latency": "latency_ms_p90",
    "p95 latency": "latency_ms_p95",
    "p99 latency": "latency_ms_p99",
    "Avg latency": "latency_ms_mean",
    "request/response": "client_marshal_ms",  # gRPC: (un)marshalling request and response; HTTP: send/recv
    "response wait": "response_wait_ms",
}
_NOT_TIMES = {"concurrency", "inferences_per_s"}
REQUIRED = ("Concurrency", "Inferences/Second", "p50 latency", "p90 latency", "p99 latency")


def _slug(column: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", column.lower()).strip("_")


def parse_csv(text: str, source: str = "perf_analyzer CSV") -> list[dict[str, float | str]]:
    """perf_analyzer's ``-f`` CSV as tidy rows: throughput, latency percentiles and the client/server breakdown
    in milliseconds (`server_ms` = queue + compute input + infer + output), other columns under their own
    names (GPU metrics stay text). A file without its columns or with a value that is not a number is one
    WorkbenchError line naming `source`."""
    reader = csv.DictReader(io.StringIO(text.strip()))
    header = [h.strip() for h in reader.fieldnames or [] if h is not None]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise WorkbenchError(f"{source}: not perf_analyzer's CSV (no column {', '.join(missing)}; header "
                             f"{','.join(header)[:120] or 'empty'})")
    rows = []
    for number, raw in enumerate(reader, start=2):
        row: dict[str, float | str] = {}
        for column, value in raw.items():
            if column is None:
                raise WorkbenchError(f"{source} line {number}: more values than columns")
            column, value = column.strip(), (value or "").strip()
            name = _COLUMNS.get(column)
            if name is None:
                row[_slug(column)] = _number(value) if _is_number(value) else value
                continue
            if not _is_number(value):
                raise WorkbenchError(f"{source} line {number}: {column} is {value!r}, not a number")
            row[name] = _number(value) if name in _NOT_TIMES else float(value) / 1000.0
        row["concurrency"] = int(row["concurrency"])
        parts = ("server_queue_ms", "server_compute_input_ms", "server_compute_infer_ms", "server_compute_output_ms")
        if all(p in row for p in parts):
            row["server_ms"] = sum(float(row[p]) for p in parts)  # type: ignore[arg-type]
        rows.append(row)
    if not rows:
        raise WorkbenchError(f"{source}: perf_analyzer wrote no measurement (header only)")
    return rows


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _number(value: str) -> float:
    number = float(value)
    return int(number) if number.is_integer() and "." not in value else number


# ------------------------------------------------------------------------------------ the sweep


@dataclass(frozen=True)
class Measurement:
    """How perf_analyzer measures one point (its own flags, so a row says exactly what was run)."""

    mode: str = "count_windows"
    request_count: int = 50  # count_windows: requests per window
    interval_ms: int = 5000  # time_windows: the window; count_windows: the first window
    stability_percent: float = 10.0
    max_trials: int = 10

    def check(self) -> Measurement:
        if self.mode not in MODES:
            raise WorkbenchError(f"unknown measurement mode '{self.mode}': use {' or '.join(MODES)}")
        for label, value in (("measurement request count", self.request_count), ("measurement interval ms",
                             self.interval_ms), ("max trials", self.max_trials)):
            if value < 1:
                raise WorkbenchError(f"{label} must be >= 1, got {value}")
        if self.stability_percent <= 0:
            raise WorkbenchError(f"stability percentage must be > 0, got {self.stability_percent}")
        return self

    def flags(self) -> list[str]:
        flags = ["--measurement-mode", self.mode, "--measurement-interval", str(self.interval_ms),
                 "-s", f"{self.stability_percent:g}", "-r", str(self.max_trials)]
        if self.mode == "count_windows":
            flags += ["--measurement-request-count", str(self.request_count)]
        return flags


def command(settings: Settings, model: str, protocol: str, concurrency: int, batch_size: int, data_file: Path,
            csv_file: Path, measurement: Measurement, table: str | None = None, via_proxy: bool = False) -> list[str]:
    """perf_analyzer's arguments for one point (gRPC over TLS with settings.tls, as every other Triton client)."""
    host, port = triton_address(settings, protocol, via_proxy)
    args = ["-m", model, "-u", f"{host}:{port}", "-i", protocol, "-b", str(batch_size),
            "--concurrency-range", f"{concurrency}:{concurrency}", "--input-data", str(data_file),
            "-f", str(csv_file), "--verbose-csv", *measurement.flags()]
    if table:
        args += ["--request-parameter", f"table:{table}:string"]
    if settings.tls and protocol == "grpc":
        args += ["--ssl-grpc-use-ssl", "true", "--ssl-grpc-root-certifications-file", str(settings.ca_file())]
    return args


def _failure(done: subprocess.CompletedProcess, model: str, protocol: str, url: str) -> WorkbenchError:
    """perf_analyzer's own error line (it prints the server's answer), or its last line."""
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    reason = (errors or lines or [f"exit status {done.returncode}"])[0]
    return WorkbenchError(f"perf_analyzer against {model} over {protocol} at {url} failed: {reason[:300]}")


def sweep_perf_analyzer(
    settings: Settings,
    model: str,
    loader_name: str,
    dataset: str,
    concurrencies: Iterable[int],
    batch_sizes: Iterable[int],
    protocol: str = "grpc",
    *,
    split: str = "train",
    samples: int = 64,
    measurement: Measurement | None = None,
    loader_options: dict[str, Any] | None = None,
    table: str | None = None,
    via_proxy: bool = False,
    timeout_s: float = 300.0,
    results_dir: Path | None = DEFAULT_RESULTS,
    name: str | None = None,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """perf_analyzer against `model` at every (concurrency, batch size), fed `samples` real samples of `dataset`.

    One perf_analyzer run per point (each with `timeout_s`), so a list of concurrencies need not be a range
    and a failing point names itself. Rows: throughput, p50/p90/p95/p99 latency and the client/server
    breakdown (ms), with the point, the measurement, perf_analyzer's version and command line and, written as
    `<name>.csv`/`.json` in `results_dir` (beside the inference sweep's), the environment; the plot goes to
    `<name>.png` (`workbench.bench.perf_analyzer_plot`), perf_analyzer's own CSV of each point to
    `results_dir/perf_analyzer/`.
    """
    kind = input_kind(model)
    check_protocol(protocol)
    concurrencies, batch_sizes = check_grid(concurrencies, batch_sizes, samples)
    measurement = (measurement or Measurement()).check()
    options = check_loader(settings, loader_name, dataset, split, loader_options)
    if results_dir is not None:
        check_writable(results_dir)
    table = (table or cassandra_table(settings, dataset, split)) if kind == "uuid" else None
    if table and protocol != "grpc":
        raise WorkbenchError(f"perf_analyzer sends request parameters (cass_to_inference's table {table}) over gRPC "
                             "only: use --protocol grpc")
    binary = find_perf_analyzer()  # after the checks of what was asked: a wrong request fails the same everywhere
    arrays = read_samples(settings, model, loader_name, dataset, samples, **options)
    url = where([triton_address(settings, protocol, via_proxy)])
    name = name or f"perf_analyzer-{model}-{protocol}"
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        data_file = Path(tmp) / "input-data.json"
        data_file.write_text(json.dumps(input_data(arrays)), encoding="utf-8")
        for batch_size, concurrency in itertools.product(batch_sizes, concurrencies):
            csv_file = Path(tmp) / f"c{concurrency}-b{batch_size}.csv"
            args = command(settings, model, protocol, concurrency, batch_size, data_file, csv_file, measurement,
                           table, via_proxy)
            done = binary.run(args, timeout_s)
            if done.returncode or not csv_file.exists():
                raise _failure(done, model, protocol, url)
            text = csv_file.read_text(encoding="utf-8")
            point = next(r for r in parse_csv(text, f"perf_analyzer CSV of {model} c={concurrency} "
                                                    f"b={batch_size}") if r["concurrency"] == concurrency)
            if results_dir is not None:
                raw = results_dir / RAW_DIR
                raw.mkdir(parents=True, exist_ok=True)
                write_atomically(raw / f"{name}-c{concurrency}-b{batch_size}.csv",
                                 lambda path, text=text: path.write_text(text, encoding="utf-8"))
            row = {
                "tool": "perf_analyzer", "model": model, "protocol": protocol, "loader": loader_name,
                "dataset": dataset, "split": split, "input": kind, "batch_size": batch_size, **point,
                "concurrency": concurrency,
                "config": {"samples": int(next(iter(arrays.values())).shape[0]),
                           "entry_bytes": int(sum(a[0].nbytes for a in arrays.values())),
                           "measurement": asdict(measurement), "table": table, "via_proxy": via_proxy,
                           "loader_options": options, "triton": url, "perf_analyzer": binary.version,
                           "command": " ".join(["perf_analyzer", *args]).replace(str(data_file), "input-data.json")
                           .replace(str(csv_file), f"{csv_file.name}")},
            }
            rows.append(row)
            if progress is not None:
                progress(row)
    if results_dir is not None:
        from workbench.bench.perf_analyzer_plot import plot_perf_analyzer

        environment = describe_environment(settings)
        write_results(results_dir, name, rows, environment)
        plot_perf_analyzer([{**row, "environment": environment} for row in rows], results_dir / f"{name}.png")
    return rows
