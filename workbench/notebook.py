"""What every notebook does first: work from the checkout's root, and read list parameters papermill sends as text.

The notebooks (`notebooks/src/*.py`, paired .ipynb) call library functions; this module holds the two
helpers that only notebooks need.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml


def at_checkout_root() -> Path:
    """chdir to the checkout (.env, .stack/ and results/ are relative to it), also when Jupyter starts in notebooks/."""
    root = next((p for p in [Path.cwd(), *Path.cwd().parents]
                 if (p / "pyproject.toml").is_file() and (p / "workbench").is_dir()), Path.cwd())
    os.chdir(root)
    print(f"python {sys.executable}, in {root}")
    return root


def as_list(value: Any) -> list | None:
    """A list parameter: a list, JSON/YAML text such as '["a", "b"]' or '[0, 50]', "a,b", or one value."""
    if value is None or isinstance(value, list | tuple):
        return None if value is None else list(value)
    if isinstance(value, str):
        parsed = yaml.safe_load(value)
        if isinstance(parsed, list):
            return parsed
        return [yaml.safe_load(part.strip()) for part in value.split(",") if part.strip()]
    return [value]
