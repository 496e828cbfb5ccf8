"""Write the papermill notebooks of this folder from their sources in src/ (jupytext percent format).

    .venv/bin/python notebooks/sync.py          # rewrites notebooks/0*.ipynb from notebooks/src/0*.py
    .venv/bin/python notebooks/sync.py --check  # exit 1 if a committed notebook differs from its source

Edit the sources (ruff checks them, they call library functions), not the .ipynb files, which stay for
papermill and JupyterLab. Each notebook has one cell tagged `parameters`; papermill injects overrides after it:

    papermill notebooks/02-loader-sweep.ipynb out.ipynb -p backends '["cassandra","s3-shards"]' -p rtt_ms '[0, 50]'

`-p` passes such lists as text: the notebooks parse them with `workbench.notebook.as_list`.
Cell ids are stable and jupytext's own metadata is dropped, so regenerating changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat

HERE = Path(__file__).resolve().parent
KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def notebook_of(source: Path) -> str:
    """The .ipynb text of one source: cells with stable ids, tags kept, no outputs."""
    nb = jupytext.read(source)
    nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"{source.stem[:2]}-{index:02d}"
        tags = cell.metadata.get("tags")
        cell.metadata = {"tags": tags} if tags else {}
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source in sorted((HERE / "src").glob("*.py")):
        path = HERE / f"{source.stem}.ipynb"
        text = notebook_of(source)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
            continue
        path.write_text(text)
        print(path)
    if stale:
        print(f"out of date (run notebooks/sync.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
