"""`make lab`: JupyterLab on the notebooks, with the project's kernel, bound to 127.0.0.1, behind a token.

The kernel is this virtual environment's Python, registered as ``workbench`` inside the environment (so a
``python3`` kernel elsewhere on the machine cannot take its place) and made the default. The token is random
per start (or ``JUPYTER_TOKEN`` when set), printed once as the URL to open, and handed to the server through
its environment, never on its command line, where ``ps`` would show it to every user of the machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import subprocess
import sys
from pathlib import Path

from workbench.errors import WorkbenchError

KERNEL = "workbench"
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def install_kernel() -> str:
    """Register this interpreter as the ``workbench`` kernel of this environment (idempotent); returns its name."""
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
                    "--display-name", "Python (workbench)"], check=True, capture_output=True, timeout=60)
    return KERNEL


def command(port: int, notebooks: Path, kernel: str = KERNEL) -> list[str]:
    """The JupyterLab server command: local address only, no browser, no port hopping, this kernel by default.

    As root (containers, CI machines) JupyterLab refuses to start without ``--allow-root``; it is added there.
    """
    return [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={notebooks}",
            f"--MappingKernelManager.default_kernel_name={kernel}", *(["--allow-root"] if os.geteuid() == 0 else [])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8888, help="local port (default 8888)")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="folder JupyterLab opens")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("jupyterlab") is None:
        raise WorkbenchError("JupyterLab is not installed here: pip install -e '.[bench]' (or make venv)")
    if not args.notebooks.is_dir():
        raise WorkbenchError(f"notebook folder {str(args.notebooks)!r} does not exist")
    kernel = install_kernel()
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_urlsafe(24)
    print(f"JupyterLab on {args.notebooks} with kernel '{kernel}' ({sys.executable}):", flush=True)
    print(f"    http://127.0.0.1:{args.port}/lab?token={token}", flush=True)
    os.execve(sys.executable, command(args.port, args.notebooks.resolve(), kernel), {**os.environ,
                                                                                     "JUPYTER_TOKEN": token})


if __name__ == "__main__":
    try:
        main()
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
