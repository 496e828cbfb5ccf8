"""The papermill notebooks run end to end against the real stack, with tiny parameters.

papermill starts the `python3` kernel; jupyter_client replaces the kernelspec's bare `python` with
sys.executable, so the kernel is this venv's interpreter (each notebook prints it; checked below).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import nbformat
import pandas as pd
import pytest

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SWEEP_LOADERS = ["fs", "s3-objects"]


def run(notebook: str, out: Path, **parameters) -> nbformat.NotebookNode:
    import papermill

    papermill.execute_notebook(str(NOTEBOOKS / f"{notebook}.ipynb"), str(out), parameters=parameters,
                               kernel_name="python3", cwd=str(ROOT), progress_bar=False, execution_timeout=240)
    return nbformat.read(out, as_version=4)


def text_of(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output["text"])
            elif "data" in output:
                parts.append(str(output["data"].get("text/plain", "")))
    return "\n".join(parts)


def images_of(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in output.get("data", {}) for cell in nb.cells for output in cell.get("outputs", []))


def drop(settings, backend: str, dataset: str) -> None:
    from workbench import catalog
    from workbench.backends import make_backend

    make_backend(backend, settings, dataset).drop()
    catalog.catalog_path(settings, backend, dataset).unlink(missing_ok=True)


def test_notebooks_are_generated_from_their_sources():
    import subprocess

    done = subprocess.run([sys.executable, str(NOTEBOOKS / "sync.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    for path in sorted(NOTEBOOKS.glob("0*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, path.name
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


def test_01_stack_and_ingest(stack, tmp_path: Path, unique: str):
    backends = ["cassandra", "s3-objects", "s3-shards", "ignite", "fs"]
    try:
        nb = run("01-stack-and-ingest", tmp_path / "01.ipynb", count=24, mean_kb=8.0, dataset=unique)
    finally:
        for backend in backends:
            drop(stack, backend, unique)
    text = text_of(nb)
    assert f"python {sys.executable}" in text  # the kernel is this venv's interpreter
    for backend in backends:
        assert f"{backend}: 24 samples" in text
        assert f"verify {backend}/{unique}: expected 24, found 24, missing 0, extra 0, mismatched 0 -> ok" in text
    for service in ("toxiproxy", "minio", "cassandra", "ignite", "triton"):
        assert service in text


@pytest.fixture(scope="module")
def sweep(stack, tmp_path_factory: pytest.TempPathFactory):
    """Notebook 02 on two loaders and two RTTs (a fresh data seed, so the datasets are this test's own)."""
    from workbench.bench.sweep import dataset_name
    from workbench.bench.sweep_config import load_sweep_config
    from workbench.loaders import loader_class

    root = tmp_path_factory.mktemp("notebooks")
    seed = 1000 + uuid.uuid4().int % 1_000_000
    try:
        nb = run("02-loader-sweep", root / "02.ipynb", name="nb-test", loaders=SWEEP_LOADERS, rtt_ms=[0, 20],
                 count=24, mean_kb=8.0, repetitions=1, epochs=1, batch_size=[4], concurrency=[4],
                 results_root=str(root / "results"), seed=seed)
        yield root, nb
    finally:
        config = root / "results" / "nb-test" / "config.json"
        if config.exists():
            cfg = load_sweep_config(json.loads(config.read_text()))
            for backend, dataset in {(loader_class(p["loader"]).backend, dataset_name(cfg, p))
                                     for p in cfg.points()}:
                drop(stack, backend, dataset)


def test_02_loader_sweep(sweep):
    root, nb = sweep
    folder = root / "results" / "nb-test"
    for name in ("runs.parquet", "runs.csv", "config.json", "environment.json"):
        assert (folder / name).exists(), name
    runs = pd.read_parquet(folder / "runs.parquet")
    assert sorted(runs["loader"].unique()) == sorted(SWEEP_LOADERS)
    assert sorted(runs["rtt_ms"].unique()) == [0, 20]
    assert len(runs) == 4  # 2 loaders x 2 RTTs x 1 repetition
    assert (runs["status"] == "ok").all(), runs[runs["status"] != "ok"][["loader", "rtt_ms", "error"]]
    assert (runs["samples"] > 0).all()
    text = text_of(nb)
    assert "4 runs, 0 failed" in text
    assert "samples_per_s_median" in text


def test_02_accepts_papermill_text_parameters(stack, tmp_path: Path):
    """`papermill -p backends '["fs"]' -p rtt_ms '[0]'` passes text; the notebook parses it (no sweep here)."""
    import papermill

    out = tmp_path / "02-text.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as failure:
        # name with a space fails SweepConfig validation: the parameters were parsed, nothing was run
        run("02-loader-sweep", out, name="not valid", backends='["fs"]', rtt_ms="[0, 50]",
            results_root=str(tmp_path / "results"))
    assert "name" in str(failure.value)
    nb = nbformat.read(out, as_version=4)
    assert not (tmp_path / "results").exists()
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and 'backends = "[\\"fs\\"]"' in injected[0].source


def test_03_triton_inference(stack, tmp_path: Path):
    from workbench.backends import make_backend

    try:
        nb = run("03-triton-inference", tmp_path / "03.ipynb", count=2, sweep_samples=8, concurrencies=[1, 2],
                 batch_sizes=[2], results_dir=str(tmp_path / "triton"))
    finally:
        make_backend("cassandra", stack, "notebook_triton", keyspace="workbench_triton").drop()
        make_backend("fs", stack, "notebook_triton").drop()
    text = text_of(nb)
    assert "ready True" in text
    assert "echo" in text
    for protocol in ("http", "grpc"):
        assert any(line.strip().startswith(protocol) for line in text.splitlines()), protocol
    assert "cass_to_inference / ensemble fed with local bytes" in text
    assert sorted(p.name for p in (tmp_path / "triton").glob("*.csv")) == [
        "cass_to_inference-grpc.csv", "ensemble-grpc.csv"]


def test_04_report(sweep, tmp_path: Path):
    root, _ = sweep
    folder = root / "results" / "nb-test"
    nb = run("04-report", tmp_path / "04.ipynb", results_dir=str(folder))
    page = folder / "report" / "report.html"
    assert page.exists()
    html = page.read_text()
    for loader in SWEEP_LOADERS:
        assert loader in html
    assert (folder / "summary.csv").exists()
    pngs = list((folder / "report").glob("*.png"))
    assert len(pngs) >= 3  # throughput, latency CDFs, AU, bars (no shard loader: no shard-size plot)
    assert images_of(nb) == len(pngs)
