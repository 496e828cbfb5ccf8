"""The sweep config: a YAML grid over loader x network x layout x loader settings x emulated compute x
client ranks.

Every field is validated before anything runs; unknown names are rejected with the valid ones listed.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, ValidationError, field_validator, model_validator

from workbench.backends import backend_class
from workbench.bench.points import AXES, SweepPoint
from workbench.errors import WorkbenchError
from workbench.loaders import LOADERS, loader_class

MAX_ACCELERATORS = 64  # emulated accelerators are threads that sleep: more would measure the GIL, not the loader
MAX_RANKS = 64  # reader ranks of one point on one host: each is a process with its own loader
NonNegatives = Annotated[list[NonNegativeFloat], Field(min_length=1)]  # a grid axis: at least one value, all >= 0

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSpec(Strict):
    count: int = Field(1000, ge=10, description="synthetic samples")
    mean_kb: float = Field(110.0, gt=0, description="mean JPEG size")
    seed: int = 0


class NetworkGrid(Strict):
    rtt_ms: NonNegatives = Field([0, 1, 10, 50, 100], description="round-trip times added by toxiproxy")
    bandwidth_mbps: NonNegatives = Field([0], description="0 = unlimited; e.g. 1000, 100")
    jitter_ms: float = Field(0, ge=0)
    bandwidth_scope: Literal["connection", "link"] = Field(
        "connection", description="connection: toxiproxy caps each connection; link: each node's own link, shared "
        "by all its connections (needs the stack's nodes in network namespaces: node_network=netns)")


class LayoutGrid(Strict):
    """Shard layout (applies only to shard-based loaders)."""

    shard_maxcount: list[int] = Field([100], description="samples per shard")
    shard_maxsize: list[float] = Field([1e8], description="bytes per shard")


class LoaderGrid(Strict):
    concurrency: list[int | Literal["auto"]] = Field([32])
    prefetch_buffers: list[int] = Field([2])
    batch_size: list[int] = Field([32])
    workers: list[int] = Field([0], description="DataLoader worker processes (0: in the main process)")
    decode: list[bool] = Field([False], description="decode JPEGs (torchvision) in the loading processes")


class ComputeGrid(Strict):
    """Emulated accelerator work per batch (MLPerf Storage / DLIO style)."""

    ms_per_batch: NonNegatives = Field([0], description="0 = no emulated compute")
    accelerators: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ACCELERATORS)]], Field(min_length=1)] = Field(
        [1], description="N emulated accelerators taking batches from the one loader at once")
    distribution: Literal["fixed", "normal"] = "fixed"
    stddev_fraction: float = Field(0.1, ge=0, description="normal: stddev as a fraction of the mean")

    @model_validator(mode="after")
    def _accelerators_compute(self) -> ComputeGrid:
        if max(self.accelerators) > 1 and max(self.ms_per_batch) <= 0:
            raise ValueError(f"accelerators {self.accelerators} need a compute time: set compute.ms_per_batch > 0 "
                             "(with no compute, N accelerators only split the batches)")
        return self


class ClientsGrid(Strict):
    """Reader ranks per point (`workbench bench clients`): each rank a process started by the launcher,
    reading its shard for one epoch; the row gets the aggregate and slowest rank's rates, every rank's AU
    and the exactly-once check. Unset (the default): the sweep reads in its own process, as before."""

    ranks: list[Annotated[int, Field(ge=1, le=MAX_RANKS)]] | None = Field(
        None, min_length=1, description="reader ranks, e.g. [1, 2, 4]; unset: no ranks (in-process reading)")
    launcher: Literal["torchrun", "mpirun"] | None = Field(None, description="default: WORKBENCH_LAUNCHER")
    start_timeout_s: float = Field(120.0, gt=0, description="longest the ranks may take to start")
    max_seconds: float = Field(600.0, gt=0, description="longest a rank may read its shard (past it: an error, "
                                                        "since the exactly-once check needs whole shards)")


class SweepConfig(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$")
    question: str = Field("", description="the one question this sweep answers (shown by its report and the index)")
    loaders: list[str] = Field(..., min_length=1)
    data: DataSpec = DataSpec()
    network: NetworkGrid = NetworkGrid()
    layout: LayoutGrid = LayoutGrid()
    loader: LoaderGrid = LoaderGrid()
    compute: ComputeGrid = ComputeGrid()
    clients: ClientsGrid = ClientsGrid()
    epochs: int = Field(2, ge=1, description="per repetition: the first is reported apart from the later ones")
    repetitions: int = Field(3, ge=1)
    warmup_batches: int = Field(2, ge=0, description="excluded from every measurement")
    max_seconds_per_epoch: float = Field(30.0, gt=0, description="a slow point stops early and reports its rate")
    ceilings: bool = Field(False, description="also measure each backend's native ceiling at every network point "
                                              "(rows ceiling:<backend>, same toxiproxy path)")

    @field_validator("loaders")
    @classmethod
    def _known_loaders(cls, names: list[str]) -> list[str]:
        return LOADERS.check_names(names)

    @model_validator(mode="before")
    @classmethod
    def _clients_shorthand(cls, raw: object) -> object:
        """`clients: [1, 2]` is `clients: {ranks: [1, 2]}`."""
        if isinstance(raw, dict) and isinstance(raw.get("clients"), list):
            return {**raw, "clients": {"ranks": raw["clients"]}}
        return raw

    @model_validator(mode="after")
    def _ranks_read_plainly(self) -> SweepConfig:
        """Ranks read one epoch each (epochs defaults to 1 with ranks), through the loader itself, one emulated
        accelerator per rank (DLIO's model)."""
        if self.clients.ranks is None:
            return self
        if "epochs" not in self.model_fields_set:
            self.epochs = 1
        clashes = [f"{name} {values}" for name, values, plain in (
            ("loader.workers", self.loader.workers, [0]), ("loader.decode", self.loader.decode, [False]),
            ("compute.accelerators", self.compute.accelerators, [1]), ("epochs", self.epochs, 1),
            ("compute.distribution", self.compute.distribution, "fixed")) if values != plain]
        if clashes:
            raise ValueError(f"clients.ranks {self.clients.ranks}: each rank reads one epoch of its shard through "
                             "the loader as one emulated accelerator, so use workers [0], decode [false], "
                             f"accelerators [1], a fixed compute time and epochs 1 (not {', '.join(clashes)})")
        return self

    @model_validator(mode="after")
    def _data_fills_a_batch(self) -> SweepConfig:
        if self.data.count < max(self.loader.batch_size):
            raise ValueError(f"data.count {self.data.count} is smaller than the largest batch_size "
                             f"{max(self.loader.batch_size)}: nothing would be measured")
        return self

    def points(self) -> list[SweepPoint]:
        """The grid: for each loader, the product of every axis's values (sharded-only axes: None elsewhere)."""

        points = []
        for name in self.loaders:
            sharded = backend_class(loader_class(name).backend).sharded
            values = [[None] if a.sharded_only and not sharded else _listed(getattr(getattr(self, a.section), a.option))
                      for a in AXES.values()]
            points.extend(SweepPoint(name, *combination) for combination in itertools.product(*values))
        return points


def _listed(values: list | None) -> list:
    """An axis's values; an unset axis (None) is the one value None."""
    return [None] if values is None else values


def load_sweep_config(source: Path | str | dict) -> SweepConfig:
    """Parse and validate; any problem is one WorkbenchError listing the valid options."""
    if isinstance(source, dict):
        raw, where = source, "sweep config"
    else:
        path = Path(source)
        if not path.exists():
            raise WorkbenchError(f"sweep config {path} does not exist")
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except (yaml.YAMLError, OSError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: deep nesting
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise WorkbenchError(f"sweep config {path} is not valid YAML: {first}") from None
        where = str(path)
    if not isinstance(raw, dict):
        raise WorkbenchError(f"{where}: expected a mapping of sections (name, loaders, network, ...), "
                             f"got a {type(raw).__name__}")
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                section = _section(err["loc"][:-1])
                problems.append(f"unknown parameter '{loc}' (valid: {', '.join(section.model_fields)})")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                problems.append(f"'{loc}': {msg}" if loc else msg)
        message = f"{where}: " + "; ".join(problems)  # names come from the file: their newlines stay escaped
        raise WorkbenchError(message.replace("\r", "\\r").replace("\n", "\\n")) from None


def _section(loc: tuple) -> type[BaseModel]:
    model: type[BaseModel] = SweepConfig
    for part in loc:
        annotation = model.model_fields[str(part)].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return model
