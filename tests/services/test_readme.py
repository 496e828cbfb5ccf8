"""README.md shows only code that runs: every ```python block is executed against the local stack (the quick
start ingests, reads through torch and DALI; the pandas example reads a committed study), and every `workbench`
command line of a ```bash block names a real subcommand with real options (`--help` on it exits 0)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from workbench.backends import Backend
from workbench.cli import app

# the python blocks run against the stack: `make unit` (-m "not services") must leave them out
pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"^(?:\.venv/bin/)?workbench(?:\s|$)")


def blocks(lang: str) -> list[tuple[int, str]]:
    """(line number, body) of every fenced block of `lang` in the README."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group("body")) for m in FENCE.finditer(text)
            if m.group("lang") == lang]


def command_lines() -> list[tuple[int, str]]:
    """(line number, command) of every `workbench` line in the README's bash blocks, its comment cut off."""
    found = []
    for start, body in blocks("bash"):
        for offset, line in enumerate(body.splitlines(), 1):
            command = line.split(" #", 1)[0].strip()
            if COMMAND.match(command):
                found.append((start + offset, command))
    return found


PYTHON = blocks("python")
COMMANDS = command_lines()


def test_the_readme_shows_python_and_commands():
    """The checks below cannot pass by finding nothing: the quick start, the pandas example and the commands."""
    assert len(PYTHON) >= 2 and any("make_loader" in body and "image_pipeline" in body for _, body in PYTHON)
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("block", [body for _, body in PYTHON], ids=[f"line{line}" for line, _ in PYTHON])
def test_each_python_block_runs(block, stack, tmp_path, monkeypatch):
    """Run as a user would, from the checkout (Settings() reads its .env), with the catalog in a private folder;
    whatever the block stored in a backend is dropped afterwards."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("WORKBENCH_TLS_DIR", str(stack.certificates_dir()))
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(compile(block, f"<README.md python block in {tmp_path.name}>", "exec"), namespace)
    finally:
        for value in list(namespace.values()):
            if isinstance(value, Backend):
                value.drop()


def _is_group(command) -> bool:
    return hasattr(command, "get_command") and hasattr(command, "list_commands")  # typer's click or its own copy


def _leaf(words: list[str]):
    """(subcommand path, its click command, the words after it) of a command line's words."""
    command = typer.main.get_command(app)
    path: list[str] = []
    rest = list(words)
    while _is_group(command) and rest and not rest[0].startswith("-"):
        sub = command.get_command(typer.Context(command), rest[0])
        if sub is None:
            known = ", ".join(command.list_commands(typer.Context(command)))
            raise AssertionError(f"'workbench {' '.join(path + rest[:1])}': no such command (those of "
                                 f"'workbench {' '.join(path)}': {known})")
        path.append(rest.pop(0))
        command = sub
    return path, command, rest


def check_command(command: str) -> None:
    """The command's subcommand path exists (`--help` on it exits 0) and each of its --options is one it has."""
    words = shlex.split(command)[1:]
    path, leaf, rest = _leaf(words)
    assert not _is_group(leaf), f"'{command}' stops at the group 'workbench {' '.join(path)}'"
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    options = {opt for param in leaf.params for opt in (*param.opts, *param.secondary_opts)}
    unknown = [w.split("=", 1)[0] for w in rest if w.startswith("-") and w.split("=", 1)[0] not in options]
    assert not unknown, f"'{command}': 'workbench {' '.join(path)}' has no option {', '.join(unknown)}"


@pytest.mark.parametrize("command", [c for _, c in COMMANDS], ids=[f"line{line}" for line, _ in COMMANDS])
def test_each_command_exists_with_its_options(command):
    check_command(command)


@pytest.mark.parametrize(("command", "error"), [
    (".venv/bin/workbench stack upp", "no such command"), ("workbench study", "stops at the group"),
    ("workbench stack up --nodez 3", "has no option --nodez"), ("workbench results readme --chek", "--chek")])
def test_a_made_up_command_or_option_is_caught(command, error):
    with pytest.raises(AssertionError, match=error):
        check_command(command)
