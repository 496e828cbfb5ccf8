"""The environment a measurement ran in, recorded beside every result: what would change the numbers."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from workbench import memory
from workbench.gpu import gpus  # NVML: "<name>, <memory> MiB" per GPU, empty without one
from workbench.stack import status

PACKAGES = ("workbench", "numpy", "pillow", "cassandra-driver", "boto3", "pyignite", "tritonclient", "webdataset",
            "torch", "torchvision", "tensorflow", "nvidia-dali-cuda120", "nvidia-pytriton", "s3torchconnector",
            "mosaicml-streaming", "pandas", "lightning", "keras")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _gpus() -> list[str]:
    return gpus()


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def server_versions(settings) -> dict[str, str]:
    """Versions the running servers report (empty for a service that does not answer)."""

    try:
        return {row.service: row.version for row in status(settings) if row.healthy}
    except Exception:  # the environment record must never make a measurement fail
        return {}


def describe_environment(settings=None) -> dict:
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gpus": _gpus(),
        "git_commit": _git_commit(),
        "packages": package_versions(),
    }
    if settings is not None:
        env["servers"] = server_versions(settings)
        env["tls"] = settings.tls
        env["malloc"] = memory.describe(settings.malloc_tuning)  # loaders' glibc thresholds (workbench.memory)
        env["worker_start"] = settings.worker_start  # how DataLoader workers started: it moves workers > 0 rates
    return env
