"""Run every harness (fuzz_*.py) for a bounded time or number of inputs; print executions and findings per harness.

``python run.py --seconds 60`` is what `make fuzz` runs; ``--runs 300`` is the short pass of the test suite.
Each harness's full libFuzzer log goes to logs/<harness>.log and any crashing input to crashes/. Exits 1 when
a harness found a crash, so a finding is never a green run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(harness: Path, limit: list[str], timeout_s: float) -> tuple[int, str]:
    """(executions, finding or "") of one harness; its log goes to logs/<name>.log."""
    (HERE / "logs").mkdir(exist_ok=True)
    (HERE / "crashes").mkdir(exist_ok=True)
    log = HERE / "logs" / f"{harness.stem}.log"
    command = [sys.executable, str(harness), *limit, "-timeout=10", "-rss_limit_mb=3072",
               f"-artifact_prefix={HERE / 'crashes'}/{harness.stem}-", "-print_final_stats=1"]
    try:
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=timeout_s)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\nharness did not finish in {timeout_s:.0f} s", -1
    log.write_text(output)
    runs = re.findall(r"stat::number_of_executed_units: (\d+)", output) or re.findall(r"Done (\d+) runs", output)
    finding = ""
    if code != 0:
        error = re.search(r"=== Uncaught Python exception: ===\n(.*)", output)
        written = re.search(r"Test unit written to (\S+)", output)
        finding = (error.group(1) if error else f"exit {code}") + (f" (input: {written.group(1)})" if written else "")
    return int(runs[-1]) if runs else 0, finding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    limit = parser.add_mutually_exclusive_group(required=True)
    limit.add_argument("--seconds", type=int, help="time per harness")
    limit.add_argument("--runs", type=int, help="inputs per harness")
    parser.add_argument("harnesses", nargs="*", help="harness names (default: every fuzz_*.py)")
    args = parser.parse_args()
    flags = [f"-max_total_time={args.seconds}"] if args.seconds else [f"-runs={args.runs}"]
    budget = (args.seconds or 60) * 3 + 120
    names = args.harnesses or [p.stem.removeprefix("fuzz_") for p in sorted(HERE.glob("fuzz_*.py"))]
    found = False
    for name in names:
        runs, finding = run(HERE / f"fuzz_{name}.py", flags, budget)
        found |= bool(finding)
        print(f"{name:16} {runs:>10} executions  {finding or 'no crash'}", flush=True)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
