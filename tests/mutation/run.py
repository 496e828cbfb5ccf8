"""Mutation testing of the pure-logic core against the unit tests (mutmut 3), one module at a time.

``python tests/mutation/run.py`` is what `make mutation` runs; ``--module splits`` runs one module. Why one
module at a time, each against only the unit tests that cover it: a mutant is judged by the tests meant to
catch it, and the whole run stays minutes on 2 cores. Results and the surviving mutants worth noting:
tests/mutation/RESULTS.md.

The real source tree is never mutated: each module runs in a fresh temporary copy of `workbench/`, `tests/`
and pyproject.toml (with a `[tool.mutmut]` section added there), inside which mutmut makes its own copy
(``mutants/``) to mutate; the temporary folder is removed afterwards (``--keep`` keeps it, to look at a mutant
with ``mutmut show NAME`` there). Exits 1 when a module did not run, or scored under ``--fail-under``.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEP = "ǁ"  # mutmut's separator in the names of methods' mutants: "pkg.mod.xǁClassǁmethod__mutmut_3"
# Statuses (as `mutmut results --all true` words them) that mean a test caught the mutant.
KILLED = frozenset({"killed", "timeout", "caught by type check"})
# Statuses that mean the run did not judge the mutant: the run is incomplete, not a survivor.
UNJUDGED = frozenset({"not checked", "check was interrupted by user", "skipped"})
PLUGIN = "hypothesis_small"  # tests/mutation/hypothesis_small.py: the properties' small profile in mutation runs


@dataclass(frozen=True)
class ModuleSpec:
    """One module under mutation: its source file, the unit tests that cover it, and which of its functions
    count (mutant name patterns, relative to the module; empty: all of them)."""

    path: str
    tests: tuple[str, ...]
    scope: tuple[str, ...] = ()

    @property
    def dotted(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    def patterns(self) -> list[str]:
        """Full mutant name patterns (what `mutmut run` takes) of the functions in scope."""
        return [f"{self.dotted}.{p}" for p in self.scope] or [f"{self.dotted}.*"]


def _method(cls: str, name: str = "*") -> str:
    return f"x{SEP}{cls}{SEP}{name}__mutmut_*"


def _function(name: str) -> str:
    return f"x_{name}__mutmut_*"


UNIT = "tests/unit/"
MODULES: dict[str, ModuleSpec] = {
    # The shard index and slicing: names, listing, sample items cut from spans or pieces, ranged-read runs.
    # ShardSet's writing and scanning (threads, a Store's uploads) are the services tests' part.
    "layouts.shards": ModuleSpec(
        "workbench/layouts/shards.py",
        # (test_shard_spans.py's properties run 25 examples here: the hypothesis_small plugin)
        tuple(UNIT + t for t in ("test_shard_spans.py", "test_shards_interop.py", "test_layouts_shards_mutants.py")),
        (_function("is_shard_key"), _method("_Listing"), _method("ShardSet", "_listing"),
         _method("ShardSet", "free_blocks"), _function("sample_item"), _function("_shown"), _function("shard_items"),
         _function("_sliced_item"), _function("_entries"), _function("_piece_items"), _function("_piece_entries"),
         _function("sample_runs"), _function("fetch_shard"), _function("read_split_index"),
         _function("_samples_of")),
    ),
    # The objects layout's pure logic: keys from names, manifest lines' encoding, which keys are samples.
    # Not test_loader_fs.py or test_ingest_spark_plan.py: their ingests (0.5-30 s a test) made each mutant minutes.
    "layouts.objects": ModuleSpec(
        "workbench/layouts/objects.py",
        tuple(UNIT + t for t in ("test_parsers_never_crash.py", "test_layouts_objects_mutants.py")),
        (_function("object_key"), _function("manifest_key"), _function("_is_data_key"), _method("ObjectSet", "_live"),
         _method("ObjectSet", "manifest")),
    ),
    "data.shard_spans": ModuleSpec(
        "workbench/data/shard_spans.py",
        tuple(UNIT + t for t in ("test_shard_spans.py", "test_shards.py", "test_data_shard_spans_mutants.py")),
    ),
    "data.splits": ModuleSpec(
        "workbench/data/splits.py", tuple(UNIT + t for t in ("test_splits.py", "test_data_splits_mutants.py")),
    ),
    "bench.points": ModuleSpec(
        "workbench/bench/points.py",
        tuple(UNIT + t for t in ("test_clients_axis.py", "test_sweep_config.py", "test_bench_points_mutants.py")),
    ),
    # The windows a config asks for (RoundTripWindow, in_flight, InFlight and the threads are tested with
    # their users, on real servers), and the self-sizing window, whole.
    "concurrency.windows": ModuleSpec(
        "workbench/concurrency/windows.py",
        tuple(UNIT + t for t in ("test_shard_window.py", "test_concurrency_mutants.py")),
        (_method("FixedWindow"), _function("make_window"), _function("parse_concurrency"),
         _function("pool_size"), _function("fixed_depth"), _function("budget_depth")),
    ),
    "concurrency.auto_window": ModuleSpec(
        "workbench/concurrency/auto_window.py",
        tuple(UNIT + t for t in ("test_auto_window.py", "test_shard_window.py", "test_concurrency_mutants.py")),
    ),
    "loaders.order": ModuleSpec(
        "workbench/loaders/order.py",
        tuple(UNIT + t for t in ("test_loader_order.py", "test_resume_order.py", "test_loaders_order_mutants.py")),
    ),
    "loaders.resume": ModuleSpec(
        "workbench/loaders/resume.py",
        tuple(UNIT + t for t in ("test_resume_loaders.py", "test_loaders_resume_mutants.py")),
    ),
}


# --------------------------------------------------------------------------------------------- pure parts


_RESULT = re.compile(r"^\s+(\S+__mutmut_\d+): (.+?)\s*$")


def parse_results(text: str) -> dict[str, str]:
    """mutant name -> status from the output of ``mutmut results --all true`` (other lines are ignored)."""
    return {m.group(1): m.group(2) for line in text.splitlines() if (m := _RESULT.match(line))}


def is_mutants_file(test: str) -> bool:
    """Whether `test` is one of the files of tests written against surviving mutants (which may not exist yet:
    the first score of a module is taken before them)."""
    return bool(re.fullmatch(r"tests/unit/test_\w+_mutants\.py", test))


def in_scope(name: str, spec: ModuleSpec) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in spec.patterns())


@dataclass(frozen=True)
class Row:
    """One line of the table: mutants in scope, and how many a test caught."""

    module: str
    mutants: int
    killed: int
    unjudged: int = 0
    timeouts: int = 0  # of the killed: stopped by the time limit (a loop, or a machine too loaded)

    @property
    def survived(self) -> int:
        return self.mutants - self.killed - self.unjudged

    @property
    def score(self) -> float:
        judged = self.mutants - self.unjudged
        return 100.0 * self.killed / judged if judged else 0.0


def tally(module: str, statuses: dict[str, str], spec: ModuleSpec) -> Row:
    """The table row of `module` from every mutant's status, counting only the mutants in its scope."""
    mine = [s for n, s in statuses.items() if in_scope(n, spec)]
    return Row(module, len(mine), sum(s in KILLED for s in mine), sum(s in UNJUDGED for s in mine),
               sum(s == "timeout" for s in mine))


def survivors(statuses: dict[str, str], spec: ModuleSpec) -> list[str]:
    """The mutants in scope that no test caught ("survived", "no tests", "suspicious"...), sorted."""
    return sorted(n for n, s in statuses.items() if in_scope(n, spec) and s not in KILLED | UNJUDGED)


def format_table(rows: list[Row]) -> str:
    """The table `make mutation` prints (a Markdown table, so RESULTS.md can take it as is)."""
    lines = ["| module | mutants | killed | survived | score | timeouts |", "| --- |" + " ---: |" * 5]
    for r in rows:
        lines.append(f"| {r.module} | {r.mutants} | {r.killed} | {r.survived} | {r.score:.1f}% | {r.timeouts} |")
    return "\n".join(lines)


def mutmut_section(spec: ModuleSpec, also_copy: list[str] = ()) -> str:
    """The `[tool.mutmut]` section (TOML) for one module: mutate only its file, run only its tests."""
    settings = {
        "source_paths": ["workbench"],
        "only_mutate": [spec.path],
        "pytest_add_cli_args_test_selection": list(spec.tests),
        # hypothesis_small (tests/mutation/, on PYTHONPATH): 25 derandomized examples a property, no deadline
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", PLUGIN,
                                "-m", "not services and not gpu and not cluster"],
        "use_git_change_detection": False,
        "also_copy": list(also_copy),
        # a mutant that loops (the simulated-time tests) is stopped after 5 x (its tests' time + 3 s) of wall time
        # (mutmut's default: 15 x): enough for a loaded shared machine, short for a loop
        "timeout_multiplier": 5.0,
        "timeout_constant": 3.0,
    }
    return "\n[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v, ensure_ascii=False)}\n" for k, v in settings.items())


# ------------------------------------------------------------------------------------------------ running


def _tree_files() -> list[str]:
    """The checkout's files (tracked, and untracked ones git does not ignore), less the services tests: what
    the unit tests may read (notebooks/sweeps, fixtures...). Without git: workbench/, tests/, pyproject.toml."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                                check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(ROOT)) for d in ("workbench", "tests") for p in (ROOT / d).rglob("*.py")]
        listed.append("pyproject.toml")
    return sorted(f for f in listed if f and not f.startswith(("tests/services/", "tests/mutation/"))
                  and "__pycache__" not in f and (ROOT / f).is_file())


def _copy_tree(workdir: Path, spec: ModuleSpec) -> None:
    files = _tree_files()
    for f in files:
        (workdir / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, workdir / f)
    pyproject = (ROOT / "pyproject.toml").read_text()
    if "[tool.mutmut]" in pyproject:
        raise SystemExit("pyproject.toml has a [tool.mutmut] section: remove it, tests/mutation/run.py writes its own")
    # mutmut copies the sources and tests/ into mutants/ itself; the rest it is told to (also_copy)
    others = sorted({f.split("/", 1)[0] for f in files} - {"workbench", "tests"})
    (workdir / "pyproject.toml").write_text(pyproject + mutmut_section(spec, others))


def run_module(name: str, spec: ModuleSpec, jobs: int, keep: bool, log_dir: Path,
               baseline: bool = False, only: tuple[str, ...] = ()) -> tuple[Row, list[str]]:
    """Run mutmut on one module in a temporary copy of the tree; its row and its survivors. `baseline`: against
    the module's unit tests less those written against its survivors (the score they started from). `only`:
    just these mutants (names or patterns; e.g. a baseline's survivors, to see which the new tests kill)."""
    missing = [t for t in (spec.path, *spec.tests) if not (ROOT / t).exists() and not is_mutants_file(t)]
    if missing:
        raise SystemExit(f"module {name}: {', '.join(missing)} not found (fix MODULES in tests/mutation/run.py)")
    spec = dataclasses.replace(spec, tests=tuple(t for t in spec.tests if (ROOT / t).exists()
                                                 and not (baseline and is_mutants_file(t))))
    if only:
        spec = dataclasses.replace(spec, scope=tuple(n.removeprefix(spec.dotted + ".") for n in only))
    workdir = Path(tempfile.mkdtemp(prefix=f"wb-mutation-{name}-"))
    log = log_dir / f"{name}.log"
    try:
        _copy_tree(workdir, spec)
        plugin_dir = str(Path(__file__).resolve().parent)  # where pytest's `-p hypothesis_small` imports it from
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (plugin_dir, os.environ.get("PYTHONPATH")) if p)}
        mutmut = [sys.executable, "-m", "mutmut"]
        with log.open("w") as out:
            subprocess.run([*mutmut, "run", "--max-children", str(jobs), *spec.patterns()], cwd=workdir, env=env,
                           stdout=out, stderr=subprocess.STDOUT, check=False)
        done = subprocess.run([*mutmut, "results", "--all", "true"], cwd=workdir, env=env, capture_output=True,
                              text=True, check=False)
        with log.open("a") as out:
            out.write("\n--- mutmut results --all true\n" + done.stdout + done.stderr)
        statuses = parse_results(done.stdout)
        return tally(name, statuses, spec), survivors(statuses, spec)
    finally:
        if keep:
            print(f"{name}: kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULES),
                        help="a module to run (repeatable; default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1: a shared machine)")
    parser.add_argument("--keep", action="store_true", help="keep each module's temporary folder")
    parser.add_argument("--baseline", action="store_true",
                        help="leave out the tests/unit/test_*_mutants.py files: the score before them")
    parser.add_argument("--only", nargs="+", default=(), metavar="MUTANT",
                        help="run just these mutants (full names or patterns) of the one --module given")
    parser.add_argument("--survivors", action="store_true", help="list the mutants no test caught")
    parser.add_argument("--fail-under", type=float, default=0.0, help="exit 1 when a module scores less (percent)")
    parser.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()) / "wb-mutation-logs")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more")
    if args.only and len(args.module or ()) != 1:
        parser.error("--only needs exactly one --module")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise SystemExit("mutmut is not installed: `make mutation` installs it (the 'mutation' extra)") from None
    args.log_dir.mkdir(parents=True, exist_ok=True)
    rows, failed = [], False
    for name in args.module or list(MODULES):
        row, left = run_module(name, MODULES[name], args.jobs, args.keep, args.log_dir, args.baseline,
                               tuple(args.only))
        rows.append(row)
        print(f"{name}: {row.killed}/{row.mutants} killed ({row.score:.1f}%), log {args.log_dir / (name + '.log')}",
              file=sys.stderr, flush=True)
        if args.survivors:
            print("\n".join(f"  survived: {n}" for n in left), file=sys.stderr, flush=True)
        if row.mutants == 0 or row.unjudged:
            print(f"{name}: the run did not judge every mutant ({row.mutants} in scope, {row.unjudged} unjudged): "
                  "see its log", file=sys.stderr)
            failed = True
        failed |= row.score < args.fail_under
    print(format_table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
