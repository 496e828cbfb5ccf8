"""perf_analyzer's CSV parsed into tidy rows, its --input-data built from request tensors, its command line, the
binary's lookup and the sweep's plot: pure logic, no server."""

from __future__ import annotations

import base64
import json
import math
import os
import stat
import uuid
from pathlib import Path

import numpy as np
import pytest

from workbench.bench import perf_analyzer as pa
from workbench.bench.perf_analyzer_plot import plot_perf_analyzer
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.serving import pack_images, pack_uuids

# perf_analyzer 2.51's -f CSV with --verbose-csv (times in microseconds)
CSV = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,\
Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,\
Avg latency,request/response,response wait
2,41.5,120,3100,800,300,40000,50,20,45123,52000,55000,61000,46000,41.5,45000
"""


def test_the_csv_becomes_tidy_rows_in_milliseconds():
    (row,) = pa.parse_csv(CSV)
    assert row["concurrency"] == 2 and isinstance(row["concurrency"], int)
    assert row["inferences_per_s"] == 41.5 and row["client_marshal_ms"] == pytest.approx(0.0415)
    assert row["latency_ms_p50"] == pytest.approx(45.123)
    assert row["latency_ms_p99"] == pytest.approx(61.0)
    assert row["client_send_ms"] == pytest.approx(0.12)
    assert row["network_server_send_recv_ms"] == pytest.approx(3.1)
    assert row["server_ms"] == pytest.approx(0.8 + 0.3 + 40.0 + 0.05)
    assert row["response_wait_ms"] == pytest.approx(45.0)


def test_unknown_columns_are_kept_under_their_own_names():
    text = CSV.strip().replace("response wait", "response wait,Avg GPU Utilization") + ",gpu0:0.5;\n"
    (row,) = pa.parse_csv(text)
    assert row["avg_gpu_utilization"] == "gpu0:0.5;"


@pytest.mark.parametrize("text, message", [
    ("", "no column Concurrency"),
    ("Concurrency,Inferences/Second\n1,2\n", "no column p50 latency"),
    (CSV.splitlines()[0] + "\n", "wrote no measurement"),
    (CSV.replace("45123", "fast"), "p50 latency is 'fast'"),
    (CSV.strip() + ",7\n", "more values than columns"),
])
def test_a_csv_that_is_not_perf_analyzers_is_one_line_naming_it(text, message):
    with pytest.raises(WorkbenchError, match=message) as caught:
        pa.parse_csv(text, "run.csv")
    assert str(caught.value).startswith("run.csv") and "\n" not in str(caught.value)


def test_image_input_data_is_one_padded_row_and_its_length_per_entry():
    blobs = [b"\xff\xd8abc", b"\xff\xd8" + bytes(range(200)), b"x"]
    data = pa.input_data(pack_images(blobs))
    assert len(data["data"]) == 3
    for entry, blob in zip(data["data"], blobs, strict=True):
        image, size = entry["IMAGE"], entry["IMAGE_SIZE"]
        assert image["shape"] == [202]  # every row padded to the longest: one shape, so -b can batch them
        raw = base64.b64decode(image["content"]["b64"])
        assert raw[:len(blob)] == blob and raw[len(blob):] == bytes(202 - len(blob))
        assert size["shape"] == [1]
        assert int.from_bytes(base64.b64decode(size["content"]["b64"]), "little") == len(blob)
    json.dumps(data)  # what perf_analyzer reads


def test_uuid_input_data_is_each_keys_text():
    keys = [uuid.uuid4() for _ in range(4)]
    data = pa.input_data(pack_uuids(keys))
    assert [base64.b64decode(e["UUID"]["content"]["b64"]).decode() for e in data["data"]] == [str(k) for k in keys]
    assert {tuple(e["UUID"]["shape"]) for e in data["data"]} == {(36,)}


def test_input_data_needs_rows_that_agree():
    with pytest.raises(WorkbenchError, match="different or no rows"):
        pa.input_data({"A": np.zeros((2, 3), np.uint8), "B": np.zeros((3, 1), np.int64)})
    with pytest.raises(WorkbenchError, match="no tensors"):
        pa.input_data({})


def test_the_command_names_the_point_the_measurement_and_tls(tmp_path):
    (tmp_path / "ca.crt").write_text("not checked here")
    settings = Settings(state_dir=tmp_path, tls=True, tls_ca_file=tmp_path / "ca.crt")
    measurement = pa.Measurement("count_windows", request_count=20, max_trials=4)
    args = pa.command(settings, "cass_to_inference", "grpc", 3, 8, Path("in.json"), Path("out.csv"), measurement,
                      table="ks.tbl")
    line = " ".join(args)
    assert "-m cass_to_inference" in line and "-b 8" in line and "--concurrency-range 3:3" in line
    assert "--measurement-mode count_windows" in line and "--measurement-request-count 20" in line
    assert "-r 4" in line and "--input-data in.json" in line and "-f out.csv" in line
    assert "--request-parameter table:ks.tbl:string" in line
    assert f"--ssl-grpc-root-certifications-file {tmp_path / 'ca.crt'}" in line
    http = " ".join(pa.command(settings, "ensemble", "http", 1, 1, Path("i"), Path("o"),
                               pa.Measurement("time_windows")))
    assert "--ssl" not in http and "--measurement-request-count" not in http and "-i http" in http


@pytest.mark.parametrize("measurement, message", [
    (pa.Measurement("windows"), "unknown measurement mode"),
    (pa.Measurement(request_count=0), "request count must be >= 1"),
    (pa.Measurement(stability_percent=0), "stability percentage"),
])
def test_a_bad_measurement_is_refused(measurement, message):
    with pytest.raises(WorkbenchError, match=message):
        measurement.check()


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_binary_named_in_the_environment_is_used_when_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(pa, "TOOL_DIR", tmp_path / "none")
    good = _script(tmp_path / "perf_analyzer", 'echo "Perf Analyzer Version 9.9.9 (commit x)"')
    monkeypatch.setenv(pa.ENV_BINARY, str(good))
    binary = pa.find_perf_analyzer()
    assert binary.path == good and binary.version == "9.9.9"


def test_a_binary_that_does_not_start_is_one_line_saying_why(tmp_path, monkeypatch):
    monkeypatch.setattr(pa, "TOOL_DIR", tmp_path / "none")
    monkeypatch.setattr(pa.shutil, "which", lambda name: None)
    monkeypatch.setattr(pa.sys, "executable", str(tmp_path / "python"))
    bad = _script(tmp_path / "broken", "echo 'error while loading shared libraries: libb64.so.0d' >&2; exit 127")
    monkeypatch.setenv(pa.ENV_BINARY, str(bad))
    with pytest.raises(WorkbenchError, match=r"libb64\.so\.0d.*perf-install") as caught:
        pa.find_perf_analyzer()
    assert "\n" not in str(caught.value)


def test_the_plot_is_drawn_from_tidy_rows(tmp_path):
    rows = [{**pa.parse_csv(CSV)[0], "concurrency": c, "model": m, "batch_size": b, "protocol": "grpc"}
            for m in ("ensemble", "cass_to_inference") for b in (1, 4) for c in (1, 2)]
    out = plot_perf_analyzer(rows, tmp_path / "plot.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out) > 10_000
    with pytest.raises(WorkbenchError, match="no perf_analyzer rows"):
        plot_perf_analyzer([], tmp_path / "none.png")
    assert not math.isnan(rows[0]["server_ms"])
