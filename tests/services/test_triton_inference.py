"""Triton inference against the real server: ensemble over HTTP and gRPC, inference from Cassandra, errors, sweep.

A small synthetic dataset is ingested into the table cassandra_fetch reads by default
(workbench_triton.data_train); its rows are deleted at the end (the table is shared, so it is not dropped).
"""

from __future__ import annotations

import json
import math
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from pydantic import SecretStr

from workbench import catalog
from workbench.backends.registry import make_backend
from workbench.bench.inference import sweep_inference
from workbench.clients import cassandra_session, triton_client
from workbench.data import SyntheticSource
from workbench.ingest import ingest
from workbench.serving import (
    InferenceError,
    classify_images,
    classify_uuids,
    infer,
    pack_images,
    pack_uuids,
)

pytestmark = pytest.mark.services

KEYSPACE = "workbench_triton"
TABLE = f"{KEYSPACE}.data_train"
MODELS = ("preprocess", "classifier", "ensemble", "cassandra_fetch", "cass_to_inference")
PROTOCOLS = ("http", "grpc")


@pytest.fixture(scope="module")
def data(stack):
    """16 synthetic JPEGs in workbench_triton.data_train (the models' default table)."""
    name = f"ttri_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(16, mean_kb=30, seed=11, name=name)
    ingest(source, make_backend("cassandra", stack, name, keyspace=KEYSPACE), progress=False)
    samples = list(source)
    try:
        yield name, samples
    finally:
        with cassandra_session(stack) as session:
            for table in ("data_train", "metadata_train"):
                delete = session.prepare(f'DELETE FROM "{KEYSPACE}"."{table}" WHERE id = ?')
                for sample in samples:
                    session.execute(delete, (sample.id,))
        catalog.catalog_path(stack, "cassandra", name).unlink(missing_ok=True)


def _concurrently(calls):
    """Run the calls at once (so Triton's dynamic batcher can put them in one batch): results or exceptions."""
    def run(call):
        try:
            return call()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_model_is_ready(stack, protocol):
    client = triton_client(stack, protocol)
    assert client.is_server_ready()
    for model in MODELS:
        assert client.is_model_ready(model), f"{model} is not ready over {protocol}"


def test_ensemble_classifies_identically_over_http_and_grpc(stack, data):
    _, samples = data
    blobs = [s.data for s in samples[:4]]
    http = classify_images(stack, blobs, "http")
    grpc = classify_images(stack, blobs, "grpc")
    assert http["CLASS"].shape == (4,) and http["LOGITS"].shape == (4, 1000)
    assert http["CLASS"].tolist() == grpc["CLASS"].tolist()
    np.testing.assert_allclose(http["LOGITS"], grpc["LOGITS"], rtol=1e-4, atol=1e-4)
    assert http["CLASS"].tolist() == http["LOGITS"].argmax(axis=1).tolist()
    # one image alone gives what it gave inside the batch (padding and batching change nothing)
    single = classify_images(stack, blobs[2:3], "grpc")
    assert single["CLASS"].tolist() == http["CLASS"][2:3].tolist()
    np.testing.assert_allclose(single["LOGITS"][0], http["LOGITS"][2], rtol=1e-4, atol=1e-4)


def test_preprocess_output_is_normalised_chw(stack, data):
    _, samples = data
    out = infer(stack, "preprocess", pack_images([s.data for s in samples[:3]]), "grpc")
    pixels = out["PIXELS"]
    assert pixels.shape == (3, 3, 224, 224) and pixels.dtype == np.float32
    assert np.isfinite(pixels).all()
    assert -3.0 < float(pixels.mean()) < 3.0 and 0.05 < float(pixels.std()) < 5.0  # ImageNet-normalised range
    assert out["DECODE_DEVICE"].reshape(-1).tolist() == [-1] * 3  # CPU decoding here (the gpu test covers GPUs)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cass_to_inference_matches_the_ensemble(stack, data, protocol):
    _, samples = data
    chosen = samples[:6]
    from_bytes = classify_images(stack, [s.data for s in chosen], protocol)
    from_cassandra = classify_uuids(stack, [s.id for s in chosen], protocol)
    assert from_cassandra["CLASS"].tolist() == from_bytes["CLASS"].tolist()
    np.testing.assert_allclose(from_cassandra["LOGITS"], from_bytes["LOGITS"], rtol=1e-4, atol=1e-4)
    assert from_cassandra["LABEL"].tolist() == [s.label for s in chosen]


def test_cass_to_inference_reads_the_table_a_request_names(stack, data):
    _, samples = data
    keys = [samples[0].id]
    named = classify_uuids(stack, keys, "grpc", table=TABLE)
    assert named["CLASS"].tolist() == classify_uuids(stack, keys, "grpc")["CLASS"].tolist()
    with pytest.raises(InferenceError, match=r"workbench_triton\.no_such_table does not exist"):
        classify_uuids(stack, keys, "grpc", table=f"{KEYSPACE}.no_such_table")
    with pytest.raises(InferenceError, match="invalid table"):
        classify_uuids(stack, keys, "http", table="bad; DROP KEYSPACE x")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unknown_uuid_fails_only_its_request(stack, data, protocol):
    _, samples = data
    unknown = uuid.UUID("00000000-0000-4000-8000-00000000abcd")
    good = [s.id for s in samples[:3]]
    results = _concurrently([lambda k=k: classify_uuids(stack, [k], protocol) for k in [*good, unknown]])
    error = results[-1]
    assert isinstance(error, InferenceError)
    assert str(unknown) in str(error) and "not found" in str(error) and TABLE in str(error)
    assert all(isinstance(r, dict) for r in results[:-1]), results[:-1]
    # a request that mixes known and unknown ids fails as a whole, with the unknown one named
    with pytest.raises(InferenceError, match=str(unknown)):
        classify_uuids(stack, [good[0], unknown], protocol)
    # and the server goes on serving
    assert classify_uuids(stack, good, protocol)["LABEL"].tolist() == [s.label for s in samples[:3]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_uuid_fails_only_its_request(stack, data, protocol):
    _, samples = data
    results = _concurrently([
        lambda: classify_uuids(stack, ["not-a-uuid"], protocol),
        lambda: classify_uuids(stack, [samples[0].id], protocol),
    ])
    assert isinstance(results[0], InferenceError)
    assert "malformed UUID 'not-a-uuid'" in str(results[0])
    assert isinstance(results[1], dict)
    assert classify_uuids(stack, [samples[1].id], protocol)["LABEL"].tolist() == [samples[1].label]


def test_raw_16_byte_uuids_are_accepted(stack, data):
    _, samples = data
    raw = np.frombuffer(samples[0].id.bytes, dtype=np.uint8).reshape(1, 16).copy()
    out = infer(stack, "cass_to_inference", {"UUID": raw}, "grpc")
    assert out["LABEL"].reshape(-1).tolist() == [samples[0].label]


def test_undecodable_image_fails_only_its_request(stack, data):
    _, samples = data
    results = _concurrently([
        lambda: classify_images(stack, [b"this is not an image"], "grpc"),
        lambda: classify_images(stack, [samples[0].data], "grpc"),
        lambda: classify_images(stack, [samples[1].data], "http"),
    ])
    assert isinstance(results[0], InferenceError) and "cannot decode" in str(results[0])
    assert all(isinstance(r, dict) for r in results[1:]), results[1:]
    assert classify_images(stack, [samples[2].data], "http")["CLASS"].shape == (1,)


def test_wire_format_packs_rows_and_lengths():
    packed = pack_images([b"abc", b"defgh"])
    assert packed["IMAGE"].tolist() == [[97, 98, 99, 0, 0], [100, 101, 102, 103, 104]]
    assert packed["IMAGE_SIZE"].tolist() == [[3], [5]]
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert bytes(pack_uuids([key])["UUID"][0]).decode() == str(key)


def test_triton_launch_exports_what_cassandra_fetch_reads(stack, monkeypatch):
    from workbench.stack.triton import Triton

    monkeypatch.delenv("WORKBENCH_TRITON_CASSANDRA_TABLE", raising=False)
    settings = stack.model_copy(update={"cassandra_username": "reader", "cassandra_password": SecretStr("s3cr3t-Pa55"),
                                        "cassandra_port": 19999, "timeout_s": 7.5})
    launch = Triton(settings).launch()
    assert launch.env["WORKBENCH_HOST"] == settings.host
    assert launch.env["WORKBENCH_CASSANDRA_PORT"] == "19999"
    assert launch.env["WORKBENCH_TIMEOUT_S"] == "7.5"
    assert launch.env["WORKBENCH_CASSANDRA_USERNAME"] == "reader"
    assert launch.env["WORKBENCH_CASSANDRA_PASSWORD"] == "s3cr3t-Pa55"
    assert launch.env["WORKBENCH_TRITON_CASSANDRA_TABLE"]  # the default table, unless .env names one
    assert not any("s3cr3t" in part for part in launch.command)  # secrets only in the environment


@pytest.mark.parametrize(("model", "protocol"), [("ensemble", "grpc"), ("cass_to_inference", "http")])
def test_sweep_inference_yields_rows(stack, data, tmp_path, model, protocol):
    name, _ = data
    rows = sweep_inference(stack, model, "cassandra", name, [1, 4], [1, 4], protocol, samples=8,
                           results_dir=tmp_path, name="sweep")
    assert [(r["concurrency"], r["batch_size"]) for r in rows] == [(1, 1), (1, 4), (4, 1), (4, 4)]
    for row in rows:
        assert row["model"] == model and row["protocol"] == protocol
        assert row["inferences"] >= 8 and row["inferences_per_s"] > 0
        assert 0 < row["latency_ms_p50"] <= row["latency_ms_p95"] <= row["latency_ms_p99"]
        assert all(math.isfinite(row[k]) for k in ("seconds", "inferences_per_s", "latency_ms_mean"))
    if model == "cass_to_inference":
        assert rows[0]["config"]["table"] == TABLE  # found through the catalog
    written = json.loads((tmp_path / "sweep.json").read_text())
    assert len(written["rows"]) == 4 and "packages" in written["rows"][0]["environment"]
    assert (tmp_path / "sweep.csv").read_text().count("\n") == 5


@pytest.mark.gpu
def test_preprocess_decodes_on_the_gpu(stack, data):
    _, samples = data
    out = infer(stack, "preprocess", pack_images([s.data for s in samples[:2]]), "grpc")
    assert (out["DECODE_DEVICE"] >= 0).all(), "DALI decoded on the CPU although a GPU is present"
    assert out["PIXELS"].shape == (2, 3, 224, 224)


@pytest.mark.parametrize(("model", "protocol"), [("ensemble", "http"), ("cass_to_inference", "grpc")])
def test_perf_analyzer_sweep_yields_rows(stack, data, tmp_path, model, protocol):
    """Triton's perf_analyzer at 2 concurrencies x 1 batch size, fed the ingested samples (a short measurement)."""
    from workbench.bench.perf_analyzer import Measurement, find_perf_analyzer, sweep_perf_analyzer
    from workbench.errors import WorkbenchError

    try:
        find_perf_analyzer()
    except WorkbenchError as exc:
        pytest.skip(str(exc))  # `workbench inference perf-install` unpacks one
    name, samples = data
    # a loaded machine's latencies vary more than 100 % between windows: accept the first three (behaviour, not speed)
    measurement = Measurement("count_windows", request_count=4, interval_ms=1000, stability_percent=1000, max_trials=4)
    rows = sweep_perf_analyzer(stack, model, "cassandra", name, [1, 2], [2], protocol, samples=8,
                               measurement=measurement, results_dir=tmp_path, name="perf", timeout_s=240)
    assert [(r["concurrency"], r["batch_size"]) for r in rows] == [(1, 2), (2, 2)]
    for row in rows:
        assert row["tool"] == "perf_analyzer" and row["model"] == model and row["protocol"] == protocol
        assert row["inferences_per_s"] > 0
        assert 0 < row["latency_ms_p50"] <= row["latency_ms_p90"] <= row["latency_ms_p99"]
        assert row["server_compute_infer_ms"] > 0 and row["server_ms"] >= row["server_compute_infer_ms"]
        assert row["config"]["samples"] == 8 and row["config"]["perf_analyzer"]
        assert "--concurrency-range" in row["config"]["command"]
    if model == "cass_to_inference":
        assert rows[0]["config"]["table"] == TABLE and rows[0]["config"]["entry_bytes"] == 36
    else:
        assert rows[0]["config"]["entry_bytes"] > min(len(s.data) for s in samples)  # the longest row + its size
    written = json.loads((tmp_path / "perf.json").read_text())
    assert len(written["rows"]) == 2 and "packages" in written["rows"][0]["environment"]
    assert (tmp_path / "perf.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in (tmp_path / "perf_analyzer").iterdir()) == ["perf-c1-b2.csv", "perf-c2-b2.csv"]


def test_perf_analyzer_cannot_send_the_table_over_http(stack, data, tmp_path):
    from workbench.bench.perf_analyzer import sweep_perf_analyzer
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match="over gRPC only"):
        sweep_perf_analyzer(stack, "cass_to_inference", "cassandra", data[0], [1], [1], "http", results_dir=tmp_path)


def test_the_inference_sweep_preset_writes_its_spec_and_running_it_makes_the_same_rows(stack, data, tmp_path):
    """`inference sweep` is a preset of the spec kind `inference`: the spec it writes, run again, gives one row per
    point with the same fields (the numbers are timings)."""
    from typer.testing import CliRunner

    from workbench.cli import app
    from workbench.experiments import load_spec

    name, _ = data
    first, again = tmp_path / "first", tmp_path / "again"
    ran = CliRunner().invoke(app, ["inference", "sweep", "-d", name, "-m", "ensemble", "-l", "cassandra", "-c", "1,2",
                                   "-b", "1", "--samples", "4", "--results-dir", str(first)], terminal_width=200)
    assert ran.exit_code == 0, f"{ran.output}\n{ran.exception!r}"
    spec = load_spec(first / "spec.yaml")
    assert (spec.kind, spec.dataset, spec.concurrency, spec.batch_size, spec.samples) == (
        "inference", name, [1, 2], [1], 4)
    rerun = CliRunner().invoke(app, ["run", str(first / "spec.yaml"), "-o", f"results_dir={again}"],
                               terminal_width=200)
    assert rerun.exit_code == 0, f"{rerun.output}\n{rerun.exception!r}"

    def rows(folder):
        [result] = folder.glob("*.json")
        return json.loads(result.read_text())["rows"]

    shape = [sorted((r["protocol"], r["concurrency"], r["batch_size"], tuple(sorted(r))) for r in rows(f))
             for f in (first, again)]
    assert shape[0] == shape[1] and len(shape[0]) == 2 and all(r["inferences"] >= 4 for r in rows(again))
