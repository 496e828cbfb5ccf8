"""Train the classifier from storage, write its checkpoint (S3 or Ignite), serve it with Triton, check the answers.

    python -m pipelines.train_and_serve --loader cassandra --dataset digits-32px-png \\
        --checkpoint s3://workbench/checkpoints/digits.pt --steps 150

1. `train_to_checkpoint`: `pipelines.train_torch.train` (the same function the accuracy tests run: any
   loader, torch or DALI decoding, bounded steps, its validation accuracy), then the trained weights
   go to the checkpoint with `workbench.model_serving.save_classifier` (S3 or Ignite checkpoint writer).
2. `serve_and_check`: a Triton of its own serves a repository whose classifier loads that checkpoint
   (`workbench.model_serving`); the validation samples go through ``cass_to_inference`` (UUIDs: Triton
   reads the images from Cassandra) and through ``ensemble`` (the same images' bytes, sent by the client).
   Reported: the accuracy of each against the labels, their agreement, and images/s of each.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from workbench.config import Settings
from workbench.data import Sample
from workbench.errors import WorkbenchError


@contextlib.contextmanager
def captured_steps() -> Iterator[list]:
    """The `TrainStep`s `pipelines.train_torch.train` builds while inside (train returns only its report row,
    and the checkpoint needs the trained model)."""
    import pipelines.train_torch as train_torch

    made: list = []
    original = train_torch.make_step

    def make_step(*args: Any, **kwargs: Any):
        made.append(original(*args, **kwargs))
        return made[-1]

    train_torch.make_step = make_step
    try:
        yield made
    finally:
        train_torch.make_step = original


def train_to_checkpoint(loader: str, dataset: str, settings: Settings, checkpoint: str, *, decode: str = "dali",
                        model: str = "small", size: int = 32, num_classes: int = 10,
                        wrap_batches: Callable | None = None, **train_options: Any) -> dict[str, Any]:
    """Train (`pipelines.train_torch.train`) and write the weights to `checkpoint`; the training row plus
    the checkpoint's metadata (``checkpoint``, ``checkpoint_meta``)."""
    from pipelines.train_torch import train
    from workbench.model_serving import save_classifier

    with captured_steps() as steps:
        row = train(loader, dataset, settings, decode=decode, model=model, size=size, num_classes=num_classes,
                    wrap_batches=wrap_batches, **train_options)
    if len(steps) != 1:
        raise WorkbenchError(f"expected one trained model, train built {len(steps)}")
    meta = save_classifier(steps[0].model, checkpoint, settings, arch=model, num_classes=num_classes, size=size,
                           decode=decode)
    return {**row, "checkpoint": checkpoint, "checkpoint_meta": meta}


def serve_and_check(settings: Settings, dataset: str, checkpoint: str, meta: dict[str, Any],
                    samples: Sequence[Sample], split: str = "val", batch_size: int = 32, concurrency: int = 2,
                    protocol: str = "http") -> dict[str, Any]:
    """Serve `checkpoint` from a private Triton and classify `samples` (stored in `dataset`'s Cassandra table
    of `split`) by UUID and by bytes: accuracies, agreement and throughput."""
    from workbench.model_serving import (
        agreement,
        classify_in_batches,
        private_triton,
        served_accuracy,
        write_repository,
    )
    from workbench.serving import cassandra_table

    table = cassandra_table(settings, dataset, split)
    if table is None:
        raise WorkbenchError(f"dataset {dataset} has no Cassandra table for split {split}: ingest it into cassandra "
                             "(cass_to_inference reads from there)")
    labels = [int(s.label) for s in samples]  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="workbench-serve-") as tmp:
        repository = write_repository(Path(tmp) / "models", checkpoint, meta)
        with private_triton(settings, repository, Path(tmp) / "state") as served:
            by_uuid = classify_in_batches(served, "cass_to_inference", [s.id for s in samples], batch_size,
                                          concurrency, protocol, table=table)
            by_bytes = classify_in_batches(served, "ensemble", [s.data for s in samples], batch_size, concurrency,
                                           protocol)
    return {"dataset": dataset, "checkpoint": checkpoint, "samples": len(samples), "batch_size": batch_size,
            "concurrency": concurrency, "protocol": protocol,
            "uuid_accuracy": served_accuracy(by_uuid, labels), "bytes_accuracy": served_accuracy(by_bytes, labels),
            "agreement": agreement(by_uuid, by_bytes),
            "uuid_images_per_s": by_uuid.images_per_s, "bytes_images_per_s": by_bytes.images_per_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from workbench.data import DigitsSource

    p = argparse.ArgumentParser(prog="python -m pipelines.train_and_serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", required=True, help="registered loader to train from")
    p.add_argument("--dataset", required=True, help="the digits as ingested (into the loader's backend and cassandra)")
    p.add_argument("--checkpoint", required=True, help="s3://bucket/key or ignite://CACHE/name")
    p.add_argument("--decode", choices=("dali", "torch"), default="dali")
    p.add_argument("--steps", type=int, default=150)
    args = p.parse_args(argv)
    settings = Settings()
    row = train_to_checkpoint(args.loader, args.dataset, settings, args.checkpoint, decode=args.decode,
                              steps=args.steps, batch_size=32, lr=0.02, device="cpu", ceiling=False, quiet=True,
                              val_split="val", shuffle=True)
    val = [s for s in DigitsSource(name=args.dataset) if s.split == "val"]
    served = serve_and_check(settings, args.dataset, args.checkpoint, row["checkpoint_meta"], val)
    print({"training_val_accuracy": row.get("val_accuracy"), **served})
    return served


if __name__ == "__main__":
    from pipelines.common import run_cli

    run_cli(main, sys.argv[1:])
