"""notebooks/06-train-and-serve runs end to end with papermill: train from a backend, checkpoint, serve, report.

It trains from S3 shards (the test of pipelines.train_and_serve covers Cassandra) and writes the checkpoint
to Ignite; the notebook's table and plot must show the served accuracy and throughput.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import nbformat
import pandas as pd
import pytest

pytestmark = [pytest.mark.services, pytest.mark.slow,
              pytest.mark.timeout(1500)]  # bounded training and a Triton start on two loaded cores: minutes

ROOT = Path(__file__).resolve().parents[2]
# Training reads the shards out of order, so each run sees another order: at 150 steps one CI run trained to
# 0.9268 against the 0.95 asserted below (and a test with the same recipe to 0.9493 at stop 26). The bar stays.
STEPS = 300


def test_06_train_and_serve(stack, tmp_path: Path):
    papermill = pytest.importorskip("papermill")
    from workbench import catalog
    from workbench.backends import make_backend
    from workbench.model_serving import checkpoint_uri, delete_checkpoint

    dataset = f"nbserve_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "results"
    try:
        papermill.execute_notebook(
            str(ROOT / "notebooks" / "06-train-and-serve.ipynb"), str(tmp_path / "06.ipynb"),
            parameters={"backend": "s3-shards", "decode": "dali", "store": "ignite", "dataset": dataset,
                        "steps": STEPS, "results_dir": str(out)},
            kernel_name="python3", cwd=str(ROOT), progress_bar=False, execution_timeout=900)
    finally:
        for backend in ("s3-shards", "cassandra"):
            make_backend(backend, stack, dataset).drop()
            catalog.catalog_path(stack, backend, dataset).unlink(missing_ok=True)
        delete_checkpoint(checkpoint_uri(stack, "ignite", f"{dataset}-s3-shards-dali"), stack)
    nb = nbformat.read(tmp_path / "06.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "355 validation digits" in text
    table = pd.read_csv(out / "accuracy-throughput.csv")
    print(table.to_string(index=False))
    assert list(table["path"]) == ["training (s3-shards, dali)", "Triton cass_to_inference (UUIDs)",
                                   "Triton ensemble (bytes)"]
    assert (table["accuracy"] >= 0.95).all(), table
    assert (table["images_per_s"] > 0).all(), table
    assert (out / "accuracy-throughput.png").stat().st_size > 5000
