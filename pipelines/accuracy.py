"""Does the trained model get the answers right? Validation accuracy read through the same pipeline, and a saboteur.

Why: throughput alone cannot tell whether an image and its label still belong together after shuffling,
out-of-order delivery, DataLoader workers, ranks and decoding. Trained on a learnable dataset (the
digits, `workbench.data.learnable`), a pipeline that keeps them together reaches high accuracy on the
validation split; `scramble_labels` breaks the pairing on purpose (labels permuted within each batch,
as a bug in an out-of-order path would) and must bring accuracy down to chance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

DIGITS_CLASSES = 10


def scramble_labels(make_epoch: Callable[[int], Iterable[tuple]], seed: int = 0) -> Callable[[int], Iterator[tuple]]:
    """`make_epoch` whose batches keep their images but get their labels permuted within the batch.

    The class balance of every batch is unchanged; only which image carries which label is lost. The
    permutation is a derangement (every image gets another image's label): a plain permutation leaves
    each image its own label with probability 1/batch, and that bias alone trains a model well above
    chance (33 % on the digits in 150 steps, measured), which would hide a scrambling bug.
    """

    def epoch(e: int) -> Iterator[tuple]:
        import torch

        generator = torch.Generator().manual_seed(seed * 1_000_003 + e)
        for images, labels in make_epoch(e):
            yield images, labels[derangement(len(labels), generator).to(labels.device)]

    return epoch


def derangement(n: int, generator) -> Any:
    """A random permutation of range(n) without fixed points (n >= 2): a random cycle order, each to the next."""
    import torch

    if n < 2:
        return torch.arange(n)
    cycle = torch.randperm(n, generator=generator)
    order = torch.empty(n, dtype=torch.long)
    order[cycle] = cycle.roll(-1)
    return order


def classify_epoch(predict: Callable[[Any], Any], batches: Iterable[tuple]) -> tuple[int, int]:
    """(correct, seen) of `predict(images) -> logits` over one pass of (images, labels) batches."""
    import torch

    correct = seen = 0
    with torch.inference_mode():
        for images, labels in batches:
            predicted = predict(images).argmax(dim=1).cpu()
            labels = labels.view(-1).cpu().long()
            correct += int((predicted == labels).sum())
            seen += len(labels)
    return correct, seen


def step_predictor(step) -> Callable[[Any], Any]:
    """`images -> logits` of a `pipelines.common.TrainStep`'s model, in eval mode, normalised as in training."""
    model = getattr(step.model, "module", step.model)  # DDP's wrapped module: no collective in a forward
    model.eval()

    def predict(images):
        return model(step.prepare(images))

    return predict


def accuracy_row(correct: int, seen: int, split: str) -> dict[str, Any]:
    """The keys a pipeline adds to its report row for a validation pass."""
    if seen == 0:
        from workbench.errors import WorkbenchError

        raise WorkbenchError(f"the validation split {split!r} delivered no sample: ingest a source that has one "
                             "(digits, synthetic:N:learnable) or pass another --val-split")
    return {"val_split": split, "val_accuracy": round(correct / seen, 4), "val_samples": seen}
