"""README.md's measured numbers are generated from the committed results (workbench/report/readme_blocks.py):
the committed README says what the results say, and a README with one number changed fails the check, naming
its block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli_report import app
from workbench.errors import WorkbenchError
from workbench.report.readme_blocks import GENERATORS, blocks_in, differing, generate, update_readme

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS = ROOT / "results"


@pytest.fixture(scope="module")
def bodies() -> dict[str, str]:
    """What the committed results give for every block of the committed README (computed once: ~10 s)."""
    return generate(list(blocks_in(README.read_text(encoding="utf-8"))), RESULTS, RESULTS)


def test_the_committed_readme_has_two_to_four_blocks_each_naming_its_files_and_commit():
    blocks = blocks_in(README.read_text(encoding="utf-8"))
    assert 2 <= len(blocks) <= 4
    for name, body in blocks.items():
        last = body.rstrip("\n").splitlines()[-1]
        assert "results/" in last and re.search(r"made on [0-9a-f]{7}|no commit recorded", last), (name, last)
        assert ("stale" in last or "current" in last or "no commit recorded" in last), (name, last)


def test_the_committed_readme_blocks_equal_what_the_results_give(bodies):
    assert differing(README.read_text(encoding="utf-8"), bodies) == [], \
        "README.md's generated blocks are out of date: run `workbench results readme`"


def _with_one_number_changed(text: str, block: str) -> str:
    """`text` with the first multi-digit number inside `block`'s table changed."""
    start = text.index(f"<!-- generated: {block} -->")
    match = re.compile(r"\| (\d[\d,]*\d)").search(text, start)
    assert match is not None and match.start() < text.index(f"<!-- end generated: {block} -->")
    changed = str(int(match.group(1).replace(",", "")) + 1)
    return text[:match.start(1)] + changed + text[match.end(1):]


def test_a_copy_with_one_number_changed_fails_the_check_naming_its_block(tmp_path, bodies):
    name = "bench-loaders" if "bench-loaders" in bodies else next(iter(bodies))
    copy = tmp_path / "README.md"
    copy.write_text(_with_one_number_changed(README.read_text(encoding="utf-8"), name), encoding="utf-8")
    assert differing(copy.read_text(encoding="utf-8"), bodies) == [name]

    result = CliRunner().invoke(app, ["readme", "--check", "--readme", str(copy), "--root", str(RESULTS)])
    assert result.exit_code == 1, result.output
    assert name in result.output and "differ" in result.output
    assert copy.read_text(encoding="utf-8") != README.read_text(encoding="utf-8")  # --check writes nothing

    assert update_readme(copy, RESULTS, RESULTS) == [name]  # without --check it rewrites the block...
    assert copy.read_text(encoding="utf-8") == README.read_text(encoding="utf-8")  # ...back to the README's


def test_an_unknown_repeated_or_unclosed_block_is_one_error():
    with pytest.raises(WorkbenchError, match="unknown generated block 'nope'"):
        blocks_in("<!-- generated: nope -->\nx\n<!-- end generated: nope -->\n")
    name = next(iter(GENERATORS))
    block = f"<!-- generated: {name} -->\nx\n<!-- end generated: {name} -->\n"
    with pytest.raises(WorkbenchError, match="appears twice"):
        blocks_in(block + block)
    with pytest.raises(WorkbenchError, match=f"unmatched generated-block markers for {name}"):
        blocks_in(f"<!-- generated: {name} -->\nx\n")


def test_a_missing_result_file_is_one_error_naming_the_folder(tmp_path):
    (tmp_path / "bench-loaders").mkdir()
    with pytest.raises(WorkbenchError, match=r"no loaders-\*\.json under .*bench-loaders"):
        generate(["bench-loaders"], tmp_path, tmp_path)
