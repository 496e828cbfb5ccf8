"""pipelines/common.py: the run plan every pipeline makes first, the shared classifier flags, seeded weights."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.common import (  # noqa: E402
    add_classifier_flags,
    build_classifier,
    classifier_defaults,
    plan_run,
    seeded_weights,
)


def test_plan_fills_what_the_caller_left_open_from_the_device_defaults():
    plan = plan_run(50, device="cpu")
    assert (plan.arch, plan.size, plan.batch_size) == classifier_defaults(torch.device("cpu")) == ("resnet18", 112, 32)
    assert plan.warmup == 5  # steps / 10
    chosen = plan_run(3, model="small", size=32, batch_size=8, warmup=10, device="cpu")
    assert (chosen.arch, chosen.size, chosen.batch_size, chosen.warmup) == ("small", 32, 8, 2)  # warm-up < steps


def test_plan_takes_a_pipelines_own_defaults():
    plan = plan_run(1, device="cpu", defaults=lambda dev: ("tiny", 96, 16))
    assert (plan.arch, plan.size, plan.batch_size, plan.warmup) == ("tiny", 96, 16, 0)


def test_classifier_flags_parse_the_same_names_in_every_pipeline():
    parser = argparse.ArgumentParser()
    add_classifier_flags(parser, model_choices=["tiny", "small"])
    args = parser.parse_args(["--steps", "7", "--model", "small", "--val-split", "val", "--lr", "0.02"])
    assert (args.steps, args.model, args.val_split, args.lr, args.split, args.num_classes, args.seed) == \
        (7, "small", "val", 0.02, "train", 1000, 0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "resnet50"])


def _weights(seed):
    with seeded_weights(seed):
        model = build_classifier("small", 10)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_seeded_weights_repeat_and_leave_the_global_generator_as_it_was():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first, again, other = _weights(0), _weights(0), _weights(1)
    assert torch.equal(first, again)  # the same start in every run (and on every rank)
    assert not torch.equal(first, other)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's generator did not move
    assert not torch.equal(_weights(None), _weights(None))  # None: drawn from the global generator
