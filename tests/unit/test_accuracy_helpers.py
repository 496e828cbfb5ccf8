"""pipelines/accuracy.py: the label scrambler keeps images and class balance but breaks the pairing; counting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.accuracy import accuracy_row, classify_epoch, derangement, scramble_labels  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402


def _epochs(e: int):
    for b in range(3):
        labels = torch.arange(32) % 10
        images = labels.float().view(-1, 1) + 100 * b  # each image "shows" its label
        yield images, labels


def test_scramble_keeps_images_and_balance_but_breaks_pairs():
    clean = list(_epochs(0))
    scrambled = list(scramble_labels(_epochs, seed=1)(0))
    matching = 0
    for (images, labels), (s_images, s_labels) in zip(clean, scrambled, strict=True):
        assert torch.equal(images, s_images)
        assert sorted(labels.tolist()) == sorted(s_labels.tolist())
        matching += int((s_labels == labels).sum())
    assert matching < 0.3 * 96  # about a tenth stay right by chance (another image of the same class)
    again = list(scramble_labels(_epochs, seed=1)(0))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(scrambled, again, strict=True))  # seeded
    other_epoch = list(scramble_labels(_epochs, seed=1)(1))
    assert any(not torch.equal(a[1], b[1]) for a, b in zip(scrambled, other_epoch, strict=True))


def test_classify_epoch_counts_right_answers():
    def predict(images):  # one-hot of the value the image carries
        return torch.nn.functional.one_hot(images.view(-1).long() % 100 % 10, 10).float()

    assert classify_epoch(predict, _epochs(0)) == (96, 96)
    correct, seen = classify_epoch(predict, scramble_labels(_epochs, seed=2)(0))
    assert seen == 96 and correct < 30


def test_accuracy_row_and_empty_split():
    assert accuracy_row(9, 10, "val") == {"val_split": "val", "val_accuracy": 0.9, "val_samples": 10}
    with pytest.raises(WorkbenchError, match="'val' delivered no sample"):
        accuracy_row(0, 0, "val")


@pytest.mark.parametrize("n", [2, 3, 32, 17])
def test_derangement_moves_every_index(n):
    generator = torch.Generator().manual_seed(n)
    for _ in range(20):
        order = derangement(n, generator)
        assert sorted(order.tolist()) == list(range(n))
        assert all(order[i] != i for i in range(n))
    assert derangement(1, generator).tolist() == [0]
