"""`workbench results`: the index page of every committed result, and whether two runs of a study repeat.

    workbench results index                       # -> results/index.html
    workbench results compare RUN_A RUN_B         # -> RUN_B/repeatability/repeatability.{html,csv}
    workbench results stale                       # which committed results measure older code
    workbench results readme [--check]            # README.md's generated blocks, from the committed results
    workbench results remake [FOLDER ...]         # committed result folders remade from their spec.yaml
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from workbench.cli_spec import run_spec
from workbench.errors import WorkbenchError
from workbench.experiments import SPEC_FILE, load_spec
from workbench.report import build_index, compare_runs, write_comparison
from workbench.report.readme_blocks import update_readme
from workbench.report.repeat import TOLERANCE
from workbench.report.staleness import stale_results, staleness, uncommitted_measured_code

app = typer.Typer(help="results/index.html, and repeatability of two runs of one study", no_args_is_help=True)
console = Console()


@app.command("index")
def index_command(
    root: Annotated[Path, typer.Option(help="the results folder (studies/, gpu/, ...)")] = Path("results"),
) -> None:
    """Write <root>/index.html linking every study, the GPU results and the other committed results."""
    console.print(f"index: {build_index(root)}")


@app.command("compare")
def compare_command(
    first: Annotated[Path, typer.Argument(help="a results folder of the study (run A)")],
    second: Annotated[Path, typer.Argument(help="another results folder of the same study (run B)")],
    out: Annotated[Path | None, typer.Option(help="where to write; default <second>/repeatability")] = None,
    metric: Annotated[str, typer.Option(help="the per-point median compared")] = "samples_per_s",
    tolerance: Annotated[float, typer.Option(help="flag points whose medians differ by more (0.1 = 10%)")] = TOLERANCE,
    any_study: Annotated[bool, typer.Option(help="compare folders of differently named studies")] = False,
) -> None:
    """Per point the two medians, their ratio and a flag past the tolerance; a CSV and an HTML table."""
    comparison = compare_runs(first, second, metric, tolerance, any_study)
    csv, page = write_comparison(comparison, out or Path(second) / "repeatability")
    console.print(comparison.summary())
    console.print(f"repeatability: {page} ({csv.name})")


@app.command("stale")
def stale_command(
    root: Annotated[Path, typer.Option(help="the results folder (studies/, gpu/, ...)")] = Path("results"),
) -> None:
    """Each committed result whose measured code changed since it was made, and how many there are (a warning:
    regenerating takes hours, so this never fails)."""
    stale = stale_results(root, root)
    for standing in stale:
        console.print(f"stale: {standing.folder}: {standing.describe()}", highlight=False, soft_wrap=True)
    console.print(f"{len(stale)} committed result folder{'s' if len(stale) != 1 else ''} under {root} "
                  f"{'measure' if len(stale) != 1 else 'measures'} older code", highlight=False)


@app.command("readme")
def readme_command(
    check: Annotated[bool, typer.Option(help="only compare: exit 1 naming each block that differs")] = False,
    readme: Annotated[Path, typer.Option(help="the file holding the generated blocks")] = Path("README.md"),
    root: Annotated[Path, typer.Option(help="the results folder (studies/, gpu/, ...)")] = Path("results"),
) -> None:
    """Rewrite README.md's generated blocks (measured numbers) from the committed result files they name."""
    differ = update_readme(readme, root, root, check)
    if check and differ:
        console.print(f"{readme}: generated block{'s' if len(differ) != 1 else ''} {', '.join(differ)} differ from "
                      f"what {root} gives: run `workbench results readme`", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    verb = "up to date" if check or not differ else f"rewritten: {', '.join(differ)}"
    console.print(f"{readme}: generated blocks {verb}", highlight=False)


@app.command("remake")
def remake_command(
    folders: Annotated[list[Path] | None, typer.Argument(help="result folders holding a spec.yaml (default: every "
                                                               "one under --root, results/runs/ left out)")] = None,
    root: Annotated[Path, typer.Option(help="the results folder (studies/, gpu/, ...)")] = Path("results"),
    force: Annotated[bool, typer.Option(help="remake folders that already measure the current code too")] = False,
    allow_dirty: Annotated[bool, typer.Option(help="record results from uncommitted changes to the measured code "
                                                   "(their rows say -dirty)")] = False,
) -> None:
    """Remake committed result folders from their spec.yaml on the current code (what `make results` runs). A
    folder that already measures the current code is skipped, so an interrupted remake picks up where it stopped."""
    chosen = folders or sorted(p.parent for p in root.rglob(SPEC_FILE) if "runs" not in p.relative_to(root).parts)
    missing = [str(f) for f in chosen if not (f / SPEC_FILE).is_file()]
    if missing:
        raise WorkbenchError(f"no {SPEC_FILE} in {', '.join(missing)}: only folders made by `workbench run` (or a "
                             "preset) can be remade; rerun the command named in their README")
    specs = [load_spec(f / SPEC_FILE) for f in chosen]  # every spec checked before the first one runs
    dirty = uncommitted_measured_code(Path.cwd())
    if dirty and not allow_dirty:
        raise WorkbenchError(f"uncommitted changes to measured code ({', '.join(dirty[:3])}"
                             f"{', ...' if len(dirty) > 3 else ''}): commit them first, or pass --allow-dirty")
    for folder, spec in zip(chosen, specs, strict=True):
        standing = staleness(folder, Path.cwd())
        if not standing.stale and not force:
            console.print(f"{folder}: {standing.describe()}; skipped (--force remakes it)", highlight=False)
            continue
        console.print(f"remaking {folder} ({spec.kind})", highlight=False)
        run_spec(spec, console)
    if not chosen:
        console.print(f"no {SPEC_FILE} under {root}: nothing to remake", highlight=False)
