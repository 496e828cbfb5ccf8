"""results/index.html: one page linking every study, the GPU results and the other committed results folders.

    from workbench.report.index import build_index
    build_index(Path("results"))      # -> results/index.html

Each study (results/studies/<name>/) gets its report's link, its question (config.json `question`) and one
headline number computed from its runs; other folders get their description from results/README.md's table
and links to their report, README and files. Every link is relative, so the page works wherever the folder is
copied or served.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from workbench.errors import WorkbenchError
from workbench.report import link_fill, scaling
from workbench.report.data import Context, is_local_backend, is_missing, load
from workbench.report.html import fmt, page_head
from workbench.report.plots import TARGET_AU, largest_n, measured_au_rows
from workbench.report.staleness import staleness
from workbench.results import RUNS, write_atomically

STUDIES = "studies"
GPU = "gpu"
NOT_LISTED = {RUNS.name, "_scratch", STUDIES}  # git-ignored user runs and scratch; studies have their own section
MAX_FILES = 40  # files listed per folder (beyond: a count)
REPEATABILITY = "repeatability/repeatability.html"  # where `workbench results compare` writes beside a study
LAYOUT_NAMES = {"shard_maxcount": "maxcount", "shard_maxsize": "maxsize"}  # as a layout's options name them
INDEX_CSS = ".headline { font-weight: 600; } .files { font-size: 0.85em; color: #555; }"


@dataclass
class Entry:
    """One line of the index: a name, its main link, a sentence, a headline and further links."""

    name: str
    href: str | None
    sentence: str = ""
    headline: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)  # (text, relative href)
    warning: str = ""
    standing: str = ""  # the commit it was made on, and whether its code changed since (report/staleness.py)
    stale: bool = False


def _href(path: Path, root: Path) -> str:
    """A relative URL (percent-encoded: file names may hold spaces or '#')."""
    return quote(path.relative_to(root).as_posix())


def headline(ctx: Context) -> str:
    """One number that answers the study: the largest N at >= 90% AU when measured, else the fastest remote
    point at the highest RTT (its shard layout named where the study varies it) and how much of the same point's
    lowest-RTT rate it keeps; for a study of client ranks the
    exactly-once count and the rates at most vs fewest ranks; for a capped link the share of it filled."""
    if text := scaling.headline(ctx) or link_fill.headline(ctx):
        return text
    au = measured_au_rows(ctx)
    if not au.empty:
        rtt = min(au["rtt_ms"])
        parts = [f"{label} {int(largest_n(rows[rows['rtt_ms'] == rtt])) or 'none'}"
                 for label, rows in ctx.series(au, exclude=("accelerators",)).items()]
        return f"largest N with AU >= {TARGET_AU:.0%} at {rtt:g} ms RTT: " + ", ".join(parts)
    # every shard layout the sweep measured (not only its baseline): a study of layouts asks which one is best
    data = ctx.at_compute(ctx.at_bandwidth(ctx.summary), ctx.compute_free)
    data = data[data["samples_per_s_median"].notna()] if "samples_per_s_median" in data.columns else data.iloc[0:0]
    if data.empty:
        return "no successful run"
    remote = data[~data["backend"].astype(str).map(is_local_backend)]
    data = remote if len(remote) else data  # local files do not answer a question about the network
    names = data.apply(lambda row: _point_name(ctx, row, data), axis=1)
    rtts = ctx.values("rtt_ms", data)
    high = data[data["rtt_ms"] == rtts[-1]]
    best = high.loc[high["samples_per_s_median"].idxmax()]
    name = names[best.name]
    text = f"fastest at {rtts[-1]:g} ms RTT: {name}, {fmt(best['samples_per_s_median'], 0)} samples/s"
    if len(rtts) > 1:
        same = data[(names == name) & (data["rtt_ms"] == rtts[0])]["samples_per_s_median"]
        if len(same) and same.iloc[0] > 0 and math.isfinite(same.iloc[0]):
            text += f" ({best['samples_per_s_median'] / same.iloc[0]:.2f} of its {rtts[0]:g} ms rate)"
    return text


def _point_name(ctx: Context, row: Any, data: Any) -> str:
    """The line's label, plus the shard layout where the rows compared vary it (maxcount=200)."""
    layout = [f"{LAYOUT_NAMES[c]}={fmt(row[c], 0)}" for c in LAYOUT_NAMES
              if c in row and not is_missing(row[c]) and len(ctx.values(c, data)) > 1]
    if not layout:
        return ctx.label(row)
    label = ctx.label(row)
    return f"{label[:-1]}, {', '.join(layout)}]" if label.endswith("]") else f"{label} [{', '.join(layout)}]"


def study_entry(folder: Path, root: Path) -> Entry:
    entry = Entry(folder.name, None)
    report = folder / "report" / "report.html"
    entry.href = _href(report, root) if report.exists() else None
    try:
        ctx = load(folder)
    except Exception as exc:  # a folder without runs, or unreadable ones: listed with why
        entry.warning = f"no readable results: {exc}"
        return entry
    entry.sentence = ctx.question or "(its config states no question)"
    try:
        entry.headline = headline(ctx)
    except Exception as exc:  # the index must list a study even when its numbers are odd
        entry.headline = f"(no headline: {exc})"
    entry.warning = "; ".join(ctx.notes)
    if not report.exists():
        entry.warning = "; ".join(n for n in (entry.warning, "no report yet: run `workbench report` on it") if n)
    for text, path in (("summary.csv", folder / "summary.csv"), ("runs.csv", folder / "runs.csv"),
                       ("runs.parquet", folder / "runs.parquet"), ("config.json", folder / "config.json"),
                       ("repeatability", folder / REPEATABILITY)):
        if path.exists():
            entry.links.append((text, _href(path, root)))
    return entry


def descriptions(root: Path) -> dict[str, str]:
    """Folder -> its 'what' from the table in results/README.md (| `folder/` | what | machine |)."""
    readme = root / "README.md"
    out = {}
    if readme.exists():
        for line in readme.read_text(encoding="utf-8").splitlines():
            match = re.match(r"\|\s*`([^`]+?)/?`\s*\|\s*(.*?)\s*\|", line)
            if match:
                out[match.group(1).strip("/")] = re.sub(r"`([^`]*)`", r"\1", match.group(2))
    return out


def _title(readme: Path) -> str:
    for line in readme.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def folder_entry(folder: Path, root: Path, what: str) -> Entry:
    entry = Entry(folder.name, None, what)
    report, readme = folder / "report" / "report.html", folder / "README.md"
    if report.exists():
        entry.href = _href(report, root)
    elif readme.exists():
        entry.href = _href(readme, root)
    if readme.exists():
        entry.headline = _title(readme)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                               p.relative_to(folder).parts))
    entry.links = [(p.relative_to(folder).as_posix(), _href(p, root)) for p in files[:MAX_FILES]]
    if len(files) > MAX_FILES:
        entry.links.append((f"... and {len(files) - MAX_FILES} more files", _href(folder, root) + "/"))
    return entry


def entries(root: Path) -> tuple[list[Entry], list[Entry], list[Entry]]:
    """(studies, GPU results, other folders) under `root`."""
    studies_dir = root / STUDIES
    studies = [study_entry(f, root) for f in sorted(studies_dir.iterdir()) if f.is_dir()] \
        if studies_dir.is_dir() else []
    what = descriptions(root)
    gpu = [folder_entry(root / GPU, root, what.get(GPU, ""))] if (root / GPU).is_dir() else []
    others = [folder_entry(f, root, what.get(f.name, "")) for f in sorted(root.iterdir())
              if f.is_dir() and f.name not in NOT_LISTED | {GPU} and not f.name.startswith((".", "_"))]
    for entry, folder in [*((e, studies_dir / e.name) for e in studies), *((e, root / e.name) for e in gpu + others)]:
        standing = staleness(folder, root)
        entry.standing, entry.stale = standing.describe(), standing.stale
    return studies, gpu, others


def _render_entry(entry: Entry, files: bool) -> str:
    name = f'<a href="{escape(entry.href)}">{escape(entry.name)}</a>' if entry.href else escape(entry.name)
    parts = [f"<h3>{name}</h3>"]
    if entry.sentence:
        parts.append(f"<p>{escape(entry.sentence)}</p>")
    if entry.headline:
        parts.append(f'<p class="headline">{escape(entry.headline)}</p>')
    if entry.standing:
        parts.append(f'<p class="{"failed" if entry.stale else "caption"}">{escape(entry.standing)}</p>')
    if entry.warning:
        parts.append(f'<p class="failed">{escape(entry.warning)}</p>')
    if entry.links:
        links = " · ".join(f'<a href="{escape(href)}">{escape(text)}</a>' for text, href in entry.links)
        parts.append(f'<p class="{"files" if files else "caption"}">{links}</p>')
    return "\n".join(parts)


def render(studies: list[Entry], gpu: list[Entry], others: list[Entry]) -> str:
    study_html = "\n".join(_render_entry(e, False) for e in studies) or \
        "<p>No study is committed yet: run one with `workbench study run NAME` and publish it.</p>"
    gpu_html = "\n".join(_render_entry(e, True) for e in gpu) or "<p>No GPU results are committed.</p>"
    other_html = "\n".join(_render_entry(e, True) for e in others) or "<p>None.</p>"
    return f"""{page_head("workbench results", INDEX_CSS)}
<h1>workbench results</h1>
<p class="caption">Every committed result: each study answers one question (its report has the plots, the
configuration and the machine); user runs go to results/runs/ and are not listed. Written by
`workbench results index`.</p>
<h2 id="studies">Studies</h2>
{study_html}
<h2 id="gpu">GPU results</h2>
{gpu_html}
<h2 id="other">Other results</h2>
{other_html}
</body></html>
"""


def build_index(root: Path = Path("results")) -> Path:
    """Write `<root>/index.html` from what is under `root` now; returns its path."""
    root = Path(root)
    if not root.is_dir():
        raise WorkbenchError(f"no results folder {root}: pass the folder that holds studies/ and gpu/")
    page = root / "index.html"
    write_atomically(page, lambda tmp: tmp.write_text(render(*entries(root)), encoding="utf-8"))
    return page

