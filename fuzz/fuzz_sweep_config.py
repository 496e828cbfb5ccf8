"""A sweep config (YAML), read with `load_sweep_config` and expanded into its grid of points."""

from pathlib import Path

from common import ScratchFile, fuzz, instrumented

with instrumented():
    from workbench.bench.sweep_config import load_sweep_config

SCRATCH = ScratchFile("sweep")
SWEEPS = Path(__file__).resolve().parents[1] / "notebooks" / "sweeps"


def target(data: bytes) -> None:
    config = load_sweep_config(SCRATCH.write(data))
    if len(config.points()) > 100_000:  # a grid this large is the user's choice, not a parser fault
        return


if __name__ == "__main__":
    seeds = [p.read_bytes() for p in sorted(SWEEPS.glob("*.yaml"))]
    fuzz("sweep-config", target, seeds or [b"name: x\nloaders: [fs]\n"])
