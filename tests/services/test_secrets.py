"""No configured secret may appear in anything the workbench writes: results, executed notebooks, logs."""

from pathlib import Path

import pytest

from workbench.config import Settings

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".csv", ".json", ".ipynb", ".html", ".log", ".txt", ".yaml", ".md"}


def outputs(settings: Settings) -> list[Path]:
    """Committed and fresh results, executed notebooks, the stack's server logs and the catalog."""
    roots = [ROOT / "results", settings.state_dir / "run", settings.state_dir / "catalog"]
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]


def test_no_secret_in_any_output(stack):
    secrets = [s for s in stack.secrets() if len(s) >= 8]
    assert secrets, "the stack runs with generated credentials, so there is something to look for"
    files = outputs(stack)
    assert any(f.suffix == ".log" for f in files) and any(f.parent.name == "results" or "results" in f.parts
                                                          for f in files)
    leaks = [f"{path}: contains a configured secret" for path in files
             for secret in secrets if secret in path.read_text(errors="replace")]
    assert not leaks, leaks


def test_settings_never_print_secrets(stack):
    text = repr(stack) + str(stack.model_dump())
    for secret in stack.secrets():
        assert secret not in text
