"""README.md's measured numbers, written from committed results so the README never states a number by hand.

A block in the README is

    <!-- generated: NAME -->
    | a small markdown table ... |
    From FILE: made on COMMIT (DATE); stale: ...
    <!-- end generated: NAME -->

and `workbench results readme` rewrites every block's body from the result files it names (`--check`: exit 1
naming each block whose text differs). Why: the README used to quote numbers from runs nobody could find again;
now each number comes with its file, the commit it was measured on and whether that code changed since.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.report.staleness import UNKNOWN, Staleness, staleness

BLOCK = re.compile(r"<!-- generated: (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- end generated: (?P=name) -->",
                   re.DOTALL)
OPENING = re.compile(r"<!-- (?:end )?generated: ([\w.-]+) -->")
Generator = Callable[[Path, Path], str]  # (results folder, git repository) -> the block's body


def standing(s: Staleness) -> str:
    """Where the result stands, in words that change only when it turns stale or is measured again.

    `Staleness.describe()` also counts the commits since, which every commit to the measured code would change,
    and with it the README; so the count is left out here (`workbench results stale` prints it)."""
    if s.commit == UNKNOWN or s.commits_since is None:
        return s.describe()  # "no commit recorded ..." / "a commit this history lacks": stable already
    made = f"made on {s.commit}{' from a dirty tree' if s.dirty else ''} ({s.date})"
    if not s.stale:
        return f"current: {made}"
    kept = f"; kept: {s.kept_because}" if s.kept_because else ""
    return f"{made}; stale: the code it measures changed since{kept}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


def _latest(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if not found:
        raise WorkbenchError(f"no {pattern} under {folder}: the README's block needs a committed result there")
    return found[-1]  # names carry their date and time: the last one is the latest


def _rel(path: Path, results: Path) -> str:
    return (Path(results.name) / path.relative_to(results)).as_posix()


def bench_loaders(results: Path, repo: Path) -> str:
    """The latest `workbench bench loaders` run: each loader's rate beside its backend's native ceiling."""
    folder = results / "bench-loaders"
    path = _latest(folder, "loaders-*.json")
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    ceilings = {(r["backend"], r["rtt_ms"]): r for r in rows if r["loader"].startswith("ceiling:")}
    table = []
    for row in sorted((r for r in rows if not r["loader"].startswith("ceiling:")),
                      key=lambda r: (r["backend"], r["rtt_ms"], r["loader"])):
        ceiling = ceilings.get((row["backend"], row["rtt_ms"]))
        beside = f"{ceiling['samples_per_s']:,.0f} ({ceiling.get('ceiling_program') or 'Python'})" if ceiling else ""
        ratio = row.get("ratio_to_ceiling")
        table.append([row["loader"], f"{row['rtt_ms']:g}", f"{row['samples_per_s']:,.0f}", beside,
                      "" if ratio is None else f"{ratio:.2f}"])
    first = rows[0]
    lines = _table(["loader", "RTT ms", "samples/s", "native ceiling samples/s", "loader / ceiling"], table)
    lines.append(f"\nFrom `{_rel(path, results)}` ({first['samples']:,} samples of `{first['dataset']}`, median of "
                 f"{first['repeats']} repeats): {standing(staleness(folder, repo))}.")
    return "\n".join(lines) + "\n"


def studies(results: Path, repo: Path) -> str:
    """Each committed study's question and headline number, as `results/index.html` shows them."""
    from workbench.report.data import load
    from workbench.report.index import headline

    root = results / "studies"
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not folders:
        raise WorkbenchError(f"no study under {root}: publish one with `workbench study publish`")
    rows, notes = [], []
    for folder in folders:
        ctx = load(folder)
        rows.append([f"`{folder.name}`", ctx.question, headline(ctx)])
        notes.append(f"- `{_rel(folder, results)}/runs.parquet`: {standing(staleness(folder, repo))}.")
    return "\n".join([*_table(["study", "question", "headline"], rows), "", *notes]) + "\n"


SOAK_TOTALS = re.compile(r"faults injected (\d+), survived (\d+); samples lost (\d+), duplicated (\d+); "
                         r"epochs failed (\d+)")
SOAK_RUN = re.compile(r"chaos on (.+?) \(dataset (\S+), seed (\d+)\):\s+(\d+)\s+epochs in (\d+) s")


def chaos(results: Path, repo: Path) -> str:
    """The committed fault soak: faults injected and survived, samples lost and duplicated."""
    folder = results / "chaos"
    path = _latest(folder, "soak-*.txt")
    text = path.read_text(encoding="utf-8")
    totals, run = SOAK_TOTALS.search(text), SOAK_RUN.search(text)
    if totals is None or run is None:
        raise WorkbenchError(f"{path}: no 'chaos on ...' and 'faults injected ...' lines: is it a soak report?")
    injected, survived, lost, duplicated, failed = totals.groups()
    lines = _table(["loaders", "epochs", "seconds", "faults injected", "survived", "samples lost", "duplicated",
                    "epochs failed"], [[run.group(1), run.group(4), run.group(5), injected, survived, lost,
                                        duplicated, failed]])
    lines.append(f"\nFrom `{_rel(path, results)}` (dataset `{run.group(2)}`, seed {run.group(3)}): "
                 f"{standing(staleness(folder, repo))}.")
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Generator] = {"bench-loaders": bench_loaders, "studies": studies, "chaos": chaos}


def blocks_in(text: str, source: str = "README.md") -> dict[str, str]:
    """Block name -> its body as the text holds it; an unknown, repeated or unclosed block is one error."""
    found: dict[str, str] = {}
    for match in BLOCK.finditer(text):
        name = match.group("name")
        if name not in GENERATORS:
            raise WorkbenchError(f"{source}: unknown generated block '{name}': use one of {', '.join(GENERATORS)}")
        if name in found:
            raise WorkbenchError(f"{source}: block '{name}' appears twice: keep one")
        found[name] = match.group("body")
    markers = OPENING.findall(text)
    if len(markers) != 2 * len(found):
        unclosed = sorted({n for n in markers if markers.count(n) % 2 or n not in found})
        raise WorkbenchError(f"{source}: unmatched generated-block markers for {', '.join(unclosed) or '?'}: each "
                             f"'<!-- generated: NAME -->' needs its '<!-- end generated: NAME -->'")
    return found


def generate(names: list[str], results: Path, repo: Path) -> dict[str, str]:
    """The bodies the named blocks should have, from the results under `results`."""
    return {name: GENERATORS[name](Path(results), Path(repo)) for name in names}


def rewritten(text: str, bodies: dict[str, str]) -> str:
    """`text` with each block's body replaced by `bodies[name]`."""
    return BLOCK.sub(lambda m: f"<!-- generated: {m['name']} -->\n{bodies[m['name']]}"
                               f"<!-- end generated: {m['name']} -->", text)


def differing(text: str, bodies: dict[str, str]) -> list[str]:
    """The blocks whose text differs from what the results give."""
    return [name for name, body in blocks_in(text).items() if bodies.get(name) != body]


def update_readme(readme: Path, results: Path, repo: Path, check: bool = False) -> list[str]:
    """Rewrite the README's generated blocks (or, with `check`, only compare); returns the differing blocks."""
    if not readme.is_file():
        raise WorkbenchError(f"no {readme}: pass --readme PATH")
    text = readme.read_text(encoding="utf-8")
    names = list(blocks_in(text, str(readme)))
    if not names:
        raise WorkbenchError(f"{readme} has no '<!-- generated: NAME -->' block (names: {', '.join(GENERATORS)})")
    bodies = generate(names, results, repo)
    stale = differing(text, bodies)
    if stale and not check:
        readme.write_text(rewritten(text, bodies), encoding="utf-8")
    return stale
