"""The public API: every name in `workbench.__all__` resolves to what its module defines, and importing the
package and its non-framework names pulls in neither torch nor TensorFlow (checked in a fresh interpreter)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import workbench

FRAMEWORKS = ("torch", "tensorflow", "nvidia.dali")
ADAPTERS = {"LoaderDataset", "BatchDataset", "tf_dataset", "image_pipeline"}


def test_the_public_names_are_the_ones_their_modules_define():
    assert 10 <= len(workbench.__all__) <= 16
    for name in workbench.__all__:
        assert getattr(workbench, name) is getattr(importlib.import_module(workbench._PUBLIC[name]), name), name


def test_an_unknown_name_is_one_line_listing_the_public_ones():
    with pytest.raises(AttributeError, match=r"no attribute 'make_loadr' \(public names: .*make_loader"):
        workbench.make_loadr  # noqa: B018


def test_the_package_and_its_storage_loader_and_ingest_names_import_no_framework():
    names = sorted(set(workbench.__all__) - ADAPTERS)
    code = (f"import sys, json\nfrom workbench import {', '.join(names)}\n"
            f"print(json.dumps([m for m in {list(FRAMEWORKS)!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_public_function_named_like_its_module_stays_the_function_after_that_module_is_imported():
    code = ("import workbench.ingest\nfrom workbench import ingest\nimport workbench\n"
            "print(callable(ingest), workbench.ingest is ingest, ingest.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["True", "True", "workbench.ingest"]
