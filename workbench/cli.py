"""The `workbench` command line: run the stack, ingest and verify datasets, benchmark, sweep, report, chaos, Triton."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from workbench.backends import backend_class, make_backend
from workbench.bench.loaders import MOST_RUNS_PER_ROUND, ROUND_SECONDS, WARMUP_EPOCHS
from workbench.bench.s3_clients import DEFAULT_DATASET as S3_CLIENTS_DATASET
from workbench.bench.sweep_config import load_sweep_config
from workbench.catalog import catalog_path
from workbench.cli_catalog import app as catalog_app
from workbench.cli_chaos import chaos_command
from workbench.cli_clients import clients_command
from workbench.cli_inference import inference_app
from workbench.cli_k8s import app as k8s_app
from workbench.cli_netns import app as netns_app
from workbench.cli_options import key_values
from workbench.cli_report import app as results_app
from workbench.cli_spec import run_spec
from workbench.cli_study import app as study_app
from workbench.config import Settings, cluster_topology, ensure_credentials, get_settings, write_settings
from workbench.data import make_split, parse_ratios, parse_source
from workbench.errors import WorkbenchError
from workbench.experiments import ExperimentSpec, load_spec, make_spec
from workbench.experiments.ingest import IngestSpec
from workbench.experiments.loaders import LoadersSpec
from workbench.experiments.rss import RssSpec
from workbench.experiments.s3_clients import S3ClientsSpec
from workbench.experiments.sweep import SweepSpec
from workbench.ingest import BadImagesError, ingest, read_catalog, verify
from workbench.report import build_report
from workbench.results import RUNS, check_writable
from workbench.stack import down, logs, provision, status, up
from workbench.stack.compose import write_compose_config
from workbench.stack.external import status as external_status
from workbench.stack.external import unreachable
from workbench.stack.probe import probe_all

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
stack_app = typer.Typer(no_args_is_help=True, help="Run the real servers: Cassandra, MinIO, Ignite, Triton, toxiproxy.")
app.add_typer(stack_app, name="stack")
app.add_typer(results_app, name="results")  # results index, results compare
app.add_typer(netns_app, name="netns")  # netns show, netns caps
app.add_typer(study_app, name="study")  # study list, run, publish, combine
app.add_typer(catalog_app, name="catalog")  # catalog check: recorded datasets a service no longer holds
stack_app.add_typer(k8s_app)  # stack k8s, stack external-bootstrap
console = Console()

StackMode = Annotated[
    str | None, typer.Option("--stack", help="local: run the servers here; compose/external: only connect")
]
Services = Annotated[list[str] | None, typer.Argument(help="services to act on (default: all)", show_default=False)]


def settings_for(stack: str | None) -> Settings:
    if stack is None:
        return get_settings()
    if stack not in ("local", "compose", "external"):
        raise WorkbenchError(f"unknown --stack '{stack}': use local, compose or external")
    return get_settings().model_copy(update={"stack": stack})


def print_status(rows) -> None:
    table = Table("service", "version", "address", "healthy", "pid", "detail", title="workbench stack")
    for row in rows:
        healthy = "[green]yes[/green]" if row.healthy else "[red]no[/red]"
        table.add_row(row.service, row.version, row.address, healthy, str(row.pid or "-"), row.detail)
    console.print(table)


@app.command("init")
def init() -> None:
    """Write generated logins (S3 keys, Cassandra, Ignite) to .env (mode 600) for services that have none."""
    console.print("wrote generated credentials to .env" if ensure_credentials() else "credentials already configured")


@stack_app.command("up")
def stack_up(
    services: Services = None,
    stack: StackMode = None,
    nodes: Annotated[int | None, typer.Option(
        "--nodes", min=1, max=9, help="nodes per storage service (kept in .env): a Cassandra ring with RF 3, "
                                     "an Ignite cluster with one backup, distributed MinIO")] = None,
) -> None:
    """Provision (first time only) and start the servers; wait until each answers a real request."""

    if ensure_credentials():
        console.print("wrote generated credentials to .env (kept out of git)")
    if nodes is not None:
        write_settings(cluster_topology(nodes))
        console.print(f"topology: {nodes} node(s) per storage service (written to .env)")
    rows = up(settings_for(stack), services)
    print_status(rows)
    if not all(r.healthy for r in rows):
        raise typer.Exit(1)


@stack_app.command("compose-config")
def stack_compose_config() -> None:
    """Write the configuration files docker-compose.yml mounts (auth; TLS with WORKBENCH_TLS=1)."""

    if ensure_credentials():
        console.print("wrote generated credentials to .env (kept out of git)")
    settings = get_settings()
    folder = write_compose_config(settings)
    tls = "with TLS: add -f docker-compose.tls.yml" if settings.tls else "without TLS (WORKBENCH_TLS=1 for TLS)"
    console.print(f"wrote {folder} ({tls}); then: docker compose up -d")


@stack_app.command("provision")
def stack_provision(services: Services = None) -> None:
    """Download and build the servers' artifacts into the cache, without starting them."""

    errors = provision(get_settings(), services)
    for name, error in errors.items():
        console.print(f"{name}: " + (f"[red]{error}[/red]" if error else "[green]ready[/green]"))
    if any(errors.values()):
        raise typer.Exit(1)


@stack_app.command("down")
def stack_down(services: Services = None) -> None:
    """Stop the servers this stack started (by pid file, never by name)."""

    stopped = down(get_settings(), services)
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack_app.command("status")
def stack_status(services: Services = None) -> None:
    """Service, version, address, healthy, pid (stack=external: every listed endpoint)."""

    settings = get_settings()
    rows = external_status(settings, services) if settings.stack == "external" else status(settings, services)
    print_status(rows)
    if not all(r.healthy for r in rows):
        console.print(unreachable(rows), highlight=False)
        raise typer.Exit(1)


@stack_app.command("logs")
def stack_logs(service: str, lines: Annotated[int, typer.Option("-n", help="last N lines")] = 50) -> None:
    """The last lines of a server's log."""

    print(logs(get_settings(), service, lines))


@stack_app.command("probe")
def stack_probe(repeats: Annotated[int, typer.Option(min=1)] = 20) -> None:
    """Write and read one 110 KB sample through every service, directly and through toxiproxy."""

    results = probe_all(get_settings(), repeats)
    table = Table("service", "path", "bytes", "read RTT median ms", "min ms", "round trip ok",
                  title=f"one sample written and read back ({repeats} reads each)")
    for r in results:
        table.add_row(r.service, r.path, str(r.bytes), f"{r.rtt_ms_median:.2f}", f"{r.rtt_ms_min:.2f}",
                      "[green]yes[/green]" if r.ok else f"[red]no[/red] {r.detail}")
    console.print(table)
    if not all(r.ok for r in results):
        raise typer.Exit(1)


Backend = Annotated[str, typer.Option("--backend", "-b", help="cassandra | s3-objects | s3-shards | ignite | fs")]
Options = Annotated[list[str] | None, typer.Option(
    "--option", "-o", help="layout option KEY=VALUE, repeatable (e.g. workers=8, maxcount=1000; an unknown key lists "
    "the backend's options)")]
Dataset = Annotated[str | None, typer.Option(help="dataset name (default: the source's own name)")]


class Engine(StrEnum):
    """Who runs the writers of `workbench ingest`."""

    local = "local"
    spark = "spark"


class OnBad(StrEnum):
    """What `workbench ingest` does with files that are not readable images."""

    skip = "skip"
    fail = "fail"


@app.command("ingest")
def ingest_command(
    source: Annotated[str, typer.Option(
        help="synthetic:N[:classification|segmentation|multilabel] | imagefolder:PATH (Spark on a cluster: a path "
        "every executor reads)")],
    backend: Backend,
    dataset: Dataset = None,
    option: Options = None,
    on_bad: Annotated[OnBad, typer.Option(
        "--on-bad", help="bad images (empty, not an image, truncated, corrupt): skip = report each and ingest the "
        "rest; fail = check all first, write nothing, exit 1 naming them")] = OnBad.skip,
    engine: Annotated[Engine, typer.Option(
        help="local: this process's writer threads; spark: the same writers in Apache Spark tasks, as "
        "cassandra-dali-plugin ingests ImageNet (pip install 'workbench[spark]')")] = Engine.local,
    master: Annotated[str, typer.Option(help="spark: local[N] (N tasks at once here) or a cluster URL: "
                                        "spark://HOST:7077, yarn, k8s://...")] = "local[2]",
    partitions: Annotated[int | None, typer.Option(min=1, help="spark: tasks (default: one per 10,000 samples, at "
                                                   "least the master's parallelism)")] = None,
    max_failures: Annotated[int, typer.Option(min=1, help="spark: attempts per task before the ingest fails")] = 4,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", help="spark: a Spark setting KEY=VALUE, repeatable (e.g. spark.executor.memory=4g)")] = None,
) -> None:
    """Write a dataset into a backend's layout; re-running adds nothing, an interrupted run resumes, and a
    retried Spark task duplicates nothing."""

    settings = get_settings()
    layout = key_values(option, "layout option", "-o maxcount=1000")
    try:
        if engine == Engine.spark:
            from workbench.ingest_spark import ingest_with_spark

            spark_conf = key_values(conf, "Spark setting", "--conf spark.executor.memory=4g",
                                    dashes_to_underscores=False)
            summary = ingest_with_spark(source, backend, settings, dataset, master=master, partitions=partitions,
                                        on_bad=on_bad.value, max_failures=max_failures, conf=spark_conf, **layout)
        else:
            src = parse_source(source)
            target = make_backend(backend, settings, dataset or src.name, **layout)
            summary = ingest(src, target, on_bad=on_bad.value, source_spec=source)
    except BadImagesError as exc:
        for bad in exc.bad:
            console.print(f"[red]bad image[/red] {bad}", highlight=False, soft_wrap=True)
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    for bad in summary.skipped_bad:
        console.print(f"[yellow]skipped bad image[/yellow] {bad}", highlight=False, soft_wrap=True)
    console.print(summary.line(), highlight=False)
    console.print(f"catalog: {catalog_path(settings, backend, summary.dataset)}")


@app.command("split")
def split_command(
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="dataset name as ingested")],
    output: Annotated[Path, typer.Option("--output", "-o", help="the split file to write (JSON)")],
    backend: Annotated[str, typer.Option("--backend", "-b", help="where the dataset's ids and labels are read")]
    = "cassandra",
    source_split: Annotated[str, typer.Option("--from", help="the ingested split to divide")] = "train",
    ratios: Annotated[str, typer.Option(help="relative sizes, e.g. 8,2 or 7,2,1")] = "8,2",
    names: Annotated[str, typer.Option(help="names of the new splits, one per ratio")] = "train,val",
    balance: Annotated[str, typer.Option(help="original | random | per-class weights, e.g. 1,1,1")] = "original",
    seed: Annotated[int, typer.Option(help="the same seed gives the same split")] = 0,
) -> None:
    """A split file made per class from a dataset's ids and labels (the cassandra-dali-plugin split tool).

    Loaders read one of its splits with split_file/split_index (e.g. -o split_file=FILE -o split_index=val).
    """
    target = make_backend(backend, get_settings(), dataset)
    items = [(i, label) for i, label in target.labels(source_split)]
    if not items:
        raise WorkbenchError(f"dataset '{dataset}' has no samples in split '{source_split}' of {backend}: "
                             "ingest it first, or pick the split with --from")
    if any(not isinstance(label, int) for _, label in items):
        raise WorkbenchError(f"dataset '{dataset}' has non-integer labels (masks, multilabel or none): split files are "
                             "made per class; give it int labels")
    weights = balance if balance in ("original", "random") else parse_ratios(balance)
    split = make_split(items, parse_ratios(ratios), [n.strip() for n in names.split(",")], weights, seed, dataset)
    split.save(output)
    counts = ", ".join(f"{name} {count}" for name, count in split.counts().items())
    console.print(f"{output}: {counts} ({len(items)} samples of {backend}/{dataset}/{source_split}, seed {seed})")


@app.command("verify")
def verify_command(
    backend: Backend,
    dataset: Annotated[str, typer.Option(help="dataset name as ingested")],
    source: Annotated[str | None, typer.Option(help="the source to compare with (default: from the catalog)")] = None,
) -> None:
    """Re-read every stored sample and report missing, extra and mismatching ones."""

    settings = get_settings()
    record = read_catalog(settings, backend, dataset)
    layout = {k: v for k, v in record.items() if k in backend_class(backend).Options.model_fields}
    report = verify(parse_source(source or record["source"]), make_backend(backend, settings, dataset, **layout))
    console.print(f"{backend}/{dataset}: expected {report.expected}, found {report.found}, "
                  f"missing {len(report.missing)}, extra {len(report.extra)}, mismatched {len(report.mismatched)}")
    for label, names in (("missing", report.missing), ("extra", report.extra), ("mismatched", report.mismatched)):
        for name in names[:20]:
            console.print(f"  {label}: {name}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks that print numbers and write them under results/runs/.")
app.add_typer(bench_app, name="bench")
bench_app.command("clients")(clients_command)  # R reader ranks (torchrun/mpirun), exactly-once check


@bench_app.command("ingest")
def bench_ingest_command(
    count: Annotated[int, typer.Option(min=1, help="synthetic samples")] = 10_000,
    mean_kb: Annotated[float, typer.Option(min=1, help="mean JPEG size")] = 110.0,
    backend: Annotated[list[str] | None, typer.Option("--backend", "-b", help="repeatable; default: all")] = None,
    repeats: Annotated[int, typer.Option(min=1)] = 1,
    results_dir: Annotated[Path, typer.Option()] = RUNS / "bench-ingest",
) -> None:
    """Ingest MB/s per backend for the same in-memory synthetic samples."""

    _run_spec(make_spec(IngestSpec, "bench ingest", backends=backend, count=count, mean_kb=mean_kb, repeats=repeats,
                        results_dir=results_dir))


@bench_app.command("ingest-cortx")
def bench_ingest_cortx_command(
    workers: Annotated[list[int] | None, typer.Option("--workers", "-w", min=1, help="repeatable; 1 is always "
                                                      "run too, as the baseline; default: 1 and 2")] = None,
    count: Annotated[int, typer.Option(min=1, help="noise images")] = 2000,
    side: Annotated[int, typer.Option(min=1, help="image width and height, pixels")] = 96,
    repeats: Annotated[int, typer.Option(min=1, help="runs of every worker count, interleaved")] = 3,
    results_dir: Annotated[Path, typer.Option()] = RUNS / "bench-ingest",
) -> None:
    """cortx's upload_cv_dataset into MinIO with 1 and N encoding workers, same run: median seconds and ratio."""
    from workbench.bench.cortx_upload import bench_cortx_upload
    from workbench.bench.cortx_upload import table_lines as cortx_lines

    rows = bench_cortx_upload(get_settings(), count, side, workers or [1, 2], repeats, results_dir)
    console.print("\n".join(cortx_lines(rows)), highlight=False)
    console.print(f"results: {results_dir}")


@bench_app.command("loaders")
def bench_loaders_command(
    loader: Annotated[list[str] | None, typer.Option("--loader", "-l", help="repeatable; default: all here")] = None,
    count: Annotated[int, typer.Option(min=10)] = 1000,
    mean_kb: Annotated[float, typer.Option(min=1)] = 110.0,
    concurrency: Annotated[str, typer.Option(help="requests in flight, or auto (widened while rates rise)")] = "auto",
    rtt_ms: Annotated[list[float] | None, typer.Option("--rtt-ms", help="repeatable; default 0 and 50")] = None,
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    results_dir: Annotated[Path, typer.Option()] = RUNS / "bench-loaders",
    items: Annotated[bool, typer.Option(help="also each loader's per-item path, as <loader>[items]: the batch "
                                             "path's before-and-after in one run")] = False,
    warmup_epochs: Annotated[int, typer.Option(
        min=0, help="untimed epochs of each loader first (its cold one), and more while an auto window still "
                    "searches")] = WARMUP_EPOCHS,
    round_seconds: Annotated[float, typer.Option(
        min=0, help="each loader and each ceiling reads at least this long in a round (whole epochs or passes, "
                    f"at most {MOST_RUNS_PER_ROUND})")] = ROUND_SECONDS,
) -> None:
    """Every loader vs its backend's native ceiling (a compiled client), at each round-trip time."""

    _run_spec(make_spec(LoadersSpec, "bench loaders", loaders=loader, count=count, mean_kb=mean_kb,
                        concurrency=concurrency, rtt_ms=rtt_ms, repeats=repeats, results_dir=results_dir,
                        items=items, warmup_epochs=warmup_epochs, round_seconds=round_seconds))


@bench_app.command("rss")
def bench_rss_command(
    loader: Annotated[list[str] | None, typer.Option("--loader", "-l", help="repeatable; default: all here")] = None,
    count: Annotated[list[int] | None, typer.Option("--count", min=10,
                                                    help="dataset sizes, repeatable; default 2000 and 20000")] = None,
    mean_kb: Annotated[float, typer.Option(min=1)] = 110.0,
    concurrency: Annotated[str, typer.Option(help="requests in flight, or auto")] = "auto",
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    results_dir: Annotated[Path, typer.Option()] = RUNS / "bench-rss",
) -> None:
    """Each loader's peak RSS reading a whole epoch of datasets of different sizes: flat, or growing with them
    (the smallest is also read for as many samples as each bigger one: reads of equal length)."""
    _run_spec(make_spec(RssSpec, "bench rss", loaders=loader, counts=count, mean_kb=mean_kb, concurrency=concurrency,
                        repeats=repeats, results_dir=results_dir))


@bench_app.command("s3-clients")
def bench_s3_clients_command(
    dataset: Annotated[str, typer.Option(help="an s3-objects dataset (ingest it first)")] = S3_CLIENTS_DATASET,
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    concurrency: Annotated[int, typer.Option(min=1, help="GETs in flight")] = 32,
    results_dir: Annotated[Path, typer.Option()] = RUNS / "bench-s3-clients",
) -> None:
    """GETs of one dataset through boto3, obstore and the CRT client, interleaved: samples/s, CPU per sample."""

    _run_spec(make_spec(S3ClientsSpec, "bench s3-clients", dataset=dataset, repeats=repeats, concurrency=concurrency,
                        results_dir=results_dir))


@app.command("sweep")
def sweep_command(
    config: Annotated[Path, typer.Argument(help="sweep YAML (see notebooks/sweeps/)")],
    results_root: Annotated[Path, typer.Option(help="results go to RESULTS_ROOT/<sweep name>/")] = RUNS,
    report: Annotated[bool, typer.Option(help="build the report when the sweep ends")] = True,
) -> None:
    """Run a throughput/latency sweep over network, layout and loader settings."""

    cfg = load_sweep_config(config)  # invalid configs fail here, before anything runs
    check_writable(results_root / cfg.name)
    console.print(f"sweep {cfg.name}: {len(cfg.points())} points x {cfg.repetitions} repetitions")
    _run_spec(make_spec(SweepSpec, "sweep", sweep=cfg, results_dir=results_root, report=report))


@app.command("run")
def run_command(
    spec: Annotated[Path, typer.Argument(help="an experiment spec (YAML with a kind; specs/ holds one of each); a "
                                              "result folder's spec.yaml remakes it")],
    override: Annotated[list[str] | None, typer.Option(
        "-o", "--override", help="key=value, repeatable (dotted keys reach sections)")] = None,
) -> None:
    """Run one experiment spec: every field checked before anything runs; the spec is written beside its results."""

    _run_spec(load_spec(spec, override or []))


def _run_spec(spec: ExperimentSpec) -> None:
    run_spec(spec, console)


@app.command("report")
def report_command(results_dir: Annotated[Path, typer.Argument(help="a sweep's results folder")]) -> None:
    """Plots and one HTML page from a sweep's results."""

    console.print(f"report: {build_report(results_dir)}")


app.command("chaos")(chaos_command)
app.add_typer(inference_app, name="inference")


def main() -> None:
    """Entry point: user mistakes print one line, not a traceback."""
    try:
        app()
    except WorkbenchError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
