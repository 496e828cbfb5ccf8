"""`workbench stack k8s` and `workbench stack external-bootstrap`: the command line of clusters run elsewhere
(`workbench.stack.k8s`, `workbench.stack.external`). Added to `workbench stack` with `stack_app.add_typer(app)`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from workbench.config import get_settings
from workbench.stack.external import bootstrap
from workbench.stack.k8s import K8sOptions, render, write_overlay

app = typer.Typer()
console = Console()


@app.command("k8s")
def k8s_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="folder of the overlay (created; base/ is replaced)")],
    namespace: Annotated[str, typer.Option(help="namespace of every object")] = "workbench",
    image: Annotated[str, typer.Option(help="the workbench image (docker/workbench.Dockerfile)")] = "workbench:latest",
    triton_image: Annotated[str, typer.Option(help="the Triton image (docker/triton.Dockerfile)")] =
        "workbench-triton:2.51",
    loader: Annotated[str, typer.Option(help="loader the client ranks read with")] = "s3-shards",
    dataset: Annotated[str | None, typer.Option(help="dataset the ranks read (default: `bench clients`' "
                                                     "synthetic one)")] = None,
    ranks_per_pod: Annotated[int, typer.Option(min=1, help="ranks each client pod runs (pods = "
                                                           "WORKBENCH_CLIENT_RANKS / this)")] = 1,
    triton_gpus: Annotated[int, typer.Option(min=0, help="GPUs the Triton pod asks for")] = 0,
    check: Annotated[bool, typer.Option("--render/--no-render", help="run `kustomize build` on it (the binary "
                                                                      "is built on first use)")] = True,
) -> None:
    """Write a kustomize overlay for a Kubernetes cluster from the settings: node counts, replication factor and
    consistency, Ignite backups and persistence, MinIO's erasure set, client ranks; the logins as Secrets."""
    settings = get_settings()
    options = K8sOptions(namespace, image, triton_image, loader, dataset, ranks_per_pod, triton_gpus)
    folder = write_overlay(settings, out, options)
    console.print(f"wrote {folder} (the *.env files hold the logins: mode 600, listed in its .gitignore)")
    if check:
        kinds = Counter(doc["kind"] for doc in render(settings, folder))
        console.print("renders: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())), highlight=False)
    console.print(f"then: kubectl apply -k {folder}  (cass-operator and the MinIO operator installed first); clients "
                  f"elsewhere: WORKBENCH_STACK=external with the endpoint lists, `workbench stack status`")


@app.command("external-bootstrap")
def bootstrap_command(
    wait: Annotated[float, typer.Option(min=0, help="seconds to keep trying while the cluster forms")] = 0.0,
) -> None:
    """First contact with a fresh external cluster: activate Ignite once its nodes joined and create the
    configured Ignite login with the default one (what `stack up` does locally; idempotent)."""
    for line in bootstrap(get_settings(), wait):
        console.print(line, highlight=False)
