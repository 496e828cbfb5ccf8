"""Keras on N TensorFlow worker processes, each reading its own Ignite partitions (the article's training by partition).

    python -m pipelines.train_keras_partitions --dataset D --workers 2 --epochs 6 --model small --size 32 \\
        --num-classes 10 --lr 0.02 --val-split val

The launcher (this process; it imports no TensorFlow) reads the cache's partition count, deals the
partitions out round-robin (``--partitions`` picks some; each worker gets at least one), and starts one
process per worker with ``TF_CONFIG`` on 127.0.0.1 ports. Each worker reads only its partitions: one
`IgniteDataset` per partition, and a worker that owns a single partition is told it the article's way,
``IGNITE_DATASET_PART`` in its environment (which IgniteDataset honours over its ``part`` argument), so
every sample is read exactly once per epoch across the workers. The workers train together under
``tf.distribute.MultiWorkerMirroredStrategy`` (ring all-reduce over gRPC, on the CPU): each computes the
gradients of its own batch, the strategy sums them across workers (Keras' optimizer all-reduces them),
and every worker applies the same update, so the weights stay identical (batch-norm statistics are
synchronized too, `build_model(synchronized_bn=True)`). Collectives need the same number of steps on every
worker, while partitions hold unequal counts: the workers agree on the largest count first (an
all-reduce), and a worker with fewer samples pads its last batches with zero-weight elements, which
add nothing to the loss. After training each worker classifies the validation samples of its partitions;
the launcher adds the counts, and checks that the workers' weights are the same.

Returned and reported: validation accuracy, the ids each worker trained on in each epoch (to check that
every sample was read exactly once), steps per epoch, and whether the weights agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipelines.common import report, run_cli, settings_or_default
from workbench.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[1]
ENV_PART = "IGNITE_DATASET_PART"  # the article's per-node override (workbench.compat.ignite_dataset.ENV_PART)
POLL_S = 0.5


# ------------------------------------------------------------------------------- plan (pure)


def check_partitions(asked: list[int], count: int, cache: str, what: str = "--partitions") -> list[int]:
    """`asked` sorted, when every one is a partition of the cache; else one line naming the input."""
    bad = sorted({p for p in asked if not 0 <= p < count})
    if bad:
        raise WorkbenchError(f"{what} {','.join(map(str, bad))}: Ignite cache {cache} has {count} partitions "
                             f"(0..{count - 1}): pick partitions in that range")
    if len(set(asked)) != len(asked):
        raise WorkbenchError(f"{what} names a partition twice: each is read by one worker")
    return sorted(asked)


def assign_partitions(partitions: list[int], workers: int) -> list[list[int]]:
    """The partitions of each worker, dealt round-robin; every worker gets at least one."""
    if workers < 1:
        raise WorkbenchError(f"--workers {workers}: use 1 or more")
    if len(partitions) < workers:
        raise WorkbenchError(f"{len(partitions)} partitions for {workers} workers: a worker needs a partition of its "
                             "own; use fewer workers or a cache with more partitions (ingest -o partitions=N)")
    return [partitions[i::workers] for i in range(workers)]


def tf_config(ports: list[int], index: int) -> str:
    """TF_CONFIG of worker `index` in a cluster of workers on 127.0.0.1 `ports`."""
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def worker_partitions(environ: dict[str, str], assigned: list[int]) -> list[int]:
    """The partitions a worker reads: IGNITE_DATASET_PART when set (one), else those assigned to it."""
    raw = environ.get(ENV_PART, "").strip()
    if not raw:
        return assigned
    try:
        return [int(raw)]
    except ValueError:
        raise WorkbenchError(f"{ENV_PART}={raw!r} is not a partition number: set an integer or unset it") from None


def pad_count(count: int, steps: int, batch_size: int) -> int:
    """Zero-weight elements a worker with `count` samples adds so that it runs `steps` full batches."""
    return steps * batch_size - count


def merge_epochs(workers: list[list[list[str]]]) -> list[Counter]:
    """Per epoch, how often each id was trained on, all workers together."""
    epochs = {len(w) for w in workers}
    if len(epochs) != 1:
        raise WorkbenchError(f"the workers report different epoch counts {sorted(epochs)}")
    return [Counter(i for w in workers for i in w[e]) for e in range(epochs.pop())]


# ------------------------------------------------------------------------------- launcher


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def train(dataset: str, settings=None, workers: int = 2, epochs: int = 6, batch_size: int = 32, *,
          model: str = "small", size: int = 32, num_classes: int = 10, lr: float = 0.02, seed: int = 0,
          partitions: list[int] | None = None, split: str = "train", val_split: str | None = "val",
          threads: int = 1, timeout_s: float = 900, results_dir=None) -> dict:
    """Train on `workers` processes, each on its own partitions of the dataset's Ignite cache (module docstring)."""
    from workbench.backends import locate
    from workbench.compat.ignite_dataset import dataset_source

    settings = settings_or_default(settings)
    if epochs < 1 or batch_size < 1:
        raise WorkbenchError(f"--epochs {epochs} / --batch-size {batch_size}: use 1 or more")
    cache = locate(settings, "ignite", dataset).get("cache")
    if not cache:
        raise WorkbenchError(f"no Ignite cache recorded for dataset {dataset}: ingest it into ignite first")
    count = dataset_source(cache, settings=settings).partitions()
    chosen = check_partitions(list(range(count)) if partitions is None else list(partitions), count, cache)
    plan = assign_partitions(chosen, workers)
    ports = _free_ports(workers)
    job = {"cache": cache, "plan": plan, "epochs": epochs, "batch_size": batch_size, "model": model, "size": size,
           "num_classes": num_classes, "lr": lr, "seed": seed, "split": split, "val_split": val_split,
           "threads": threads}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wb-keras-parts-") as tmp:
        work = Path(tmp)
        (work / "settings.pickle").write_bytes(pickle.dumps(settings))  # secrets included: a private 0700 dir
        (work / "job.json").write_text(json.dumps(job))
        results = _run_workers(work, plan, ports, timeout_s)
    wall = time.perf_counter() - started
    epoch_ids = merge_epochs([r["epoch_ids"] for r in results])
    correct, seen = sum(r["val_correct"] for r in results), sum(r["val_seen"] for r in results)
    in_sync = len({r["weights_sha256"] for r in results}) == 1
    trained = sum(sum(len(e) for e in r["epoch_ids"]) for r in results)
    config = {"dataset": dataset, "cache": cache, "workers": workers, "partitions": plan, "epochs": epochs,
              "batch_size": batch_size, "model": model, "size": size, "lr": lr, "seed": seed,
              "strategy": "MultiWorkerMirroredStrategy"}
    extra = {"steps_per_epoch": results[0]["steps_per_epoch"], "loss": round(results[0]["loss"], 4),
             "weights_in_sync": in_sync, "samples_per_epoch": [sum(c.values()) for c in epoch_ids],
             "wall_seconds": round(wall, 2), "worker_train_seconds": [round(r["train_seconds"], 2) for r in results],
             "epoch_seconds": results[0]["epoch_seconds"],
             "worker_startup_seconds": [round(r["startup_seconds"], 2) for r in results]}
    if val_split is not None:
        from pipelines.accuracy import accuracy_row

        extra |= {**accuracy_row(correct, seen, val_split), "val_correct": correct}
    images_per_s = trained / max(1e-9, max(r["train_seconds"] for r in results))
    row = report(f"train_keras_partitions-{workers}", images_per_s, math.nan, config, results_dir, settings=settings,
                 extra=extra)
    return {**row, "epoch_ids": epoch_ids, "worker_epoch_ids": [r["epoch_ids"] for r in results],
            "worker_partitions": [r["partitions"] for r in results],
            "val_ids": [i for r in results for i in r["val_ids"]]}


def _run_workers(work: Path, plan: list[list[int]], ports: list[int], timeout_s: float) -> list[dict]:
    """Start a process per worker, wait for all; one failing (or the time running out) stops the others."""
    procs, logs = [], []
    try:
        for index, parts in enumerate(plan):
            env = {**os.environ, "TF_CONFIG": tf_config(ports, index), "PYTHONPATH": str(ROOT)}
            env.pop(ENV_PART, None)
            if len(parts) == 1:
                env[ENV_PART] = str(parts[0])  # the article's way of telling a node its partition
            log = open(work / f"worker-{index}.log", "wb")  # noqa: SIM115 - closed below, after the process
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pipelines.train_keras_partitions", "--worker", str(index), "--work", str(work),
                 "--parts", ",".join(map(str, parts))], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed:
                index, code = failed[0]
                raise WorkbenchError(f"worker {index} failed (exit {code}): {_last_line(work / f'worker-{index}.log')}")
            if time.monotonic() > deadline:
                raise WorkbenchError(f"the workers did not finish within {timeout_s:.0f} s: raise timeout_s, or look "
                                     f"at {work}/worker-*.log while they run")
            time.sleep(POLL_S)
        for index, p in enumerate(procs):
            if p.returncode != 0:
                raise WorkbenchError(f"worker {index} failed (exit {p.returncode}): "
                                     f"{_last_line(work / f'worker-{index}.log')}")
        return [json.loads((work / f"worker-{i}.json").read_text()) for i in range(len(plan))]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def _last_line(path: Path) -> str:
    """The worker's own error line (run_cli's ``error: ...``), else its last line of output."""
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[-1][:500]


# ------------------------------------------------------------------------------- worker


def _partition_elements(cache: str, parts: list[int], settings, split: str):
    """{'id', 'data', 'label'} of `split` in `parts`: one IgniteDataset (one scan) per partition, in order."""
    from pipelines.train_keras import workbench_fields
    from workbench.compat.ignite_dataset import IgniteDataset
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    scans = [IgniteDataset(cache, part=p, settings=settings) for p in parts]
    names = workbench_fields(scans[0], cache, ("id", "split", "label", "data"))
    chained = scans[0]
    for scan in scans[1:]:
        chained = chained.concatenate(scan)
    wanted = tf.constant(split)
    return chained.filter(lambda e: tf.equal(e["val"][names["split"]], wanted)).map(
        lambda e: {"id": e["val"][names["id"]], "data": e["val"][names["data"]],
                   "label": tf.cast(e["val"][names["label"]], tf.int64)})


def _batches(elements, size: int, batch_size: int, pad: int, seed: int | None):
    """(images in [-1, 1], labels, weights, ids) batches of decoded `elements` then `pad` zero-weight ones."""
    from workbench.adapters.tf import decode_images
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    if seed is not None:
        elements = elements.shuffle(4096, seed=seed, reshuffle_each_iteration=False)
    real = decode_images(elements, size).map(
        lambda e: (tf.cast(e["image"], tf.float32) / 127.5 - 1.0, e["label"], tf.constant(1.0), e["id"]),
        num_parallel_calls=tf.data.AUTOTUNE)
    if pad > 0:
        blank = (tf.zeros((size, size, 3)), tf.constant(0, tf.int64), tf.constant(0.0), tf.constant(b""))
        real = real.concatenate(tf.data.Dataset.from_tensors(blank).repeat(pad))
    return real.batch(batch_size).prefetch(2)


def worker_main(index: int, work: Path, assigned: list[int]) -> None:
    """One worker: join the strategy, train on its partitions, write ``worker-<index>.json``."""
    job = json.loads((work / "job.json").read_text())
    settings = pickle.loads((work / "settings.pickle").read_bytes())
    from pipelines.train_keras import build_model, configure_threads
    from workbench.compat.ignite_dataset import dataset_source

    parts = worker_partitions(dict(os.environ), assigned)
    count = dataset_source(job["cache"], settings=settings, part=parts[0]).partitions()
    check_partitions(parts, count, job["cache"], ENV_PART if os.environ.get(ENV_PART) else "--partitions")
    configure_threads(job["threads"])
    import keras

    from workbench.tf_import import tensorflow
    tf = tensorflow()

    began = time.perf_counter()
    ring = tf.distribute.experimental.CommunicationImplementation.RING  # gRPC between CPU workers
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring))
    workers = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(job["seed"])
    with strategy.scope():
        net = build_model(job["model"], job["size"], job["num_classes"], synchronized_bn=True)
        optimizer = keras.optimizers.SGD(learning_rate=job["lr"], momentum=0.9)
        optimizer.build(net.trainable_variables)
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    global_batch = float(job["batch_size"] * workers)

    @tf.function
    def step(images, labels, weights):
        def replica(images, labels, weights):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(per_example(labels, net(images, training=True)) * weights) / global_batch
            optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables,
                                          strict=True))  # Keras' optimizer sums the gradients of all workers
            return loss
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(images, labels, weights)),
                               axis=None)

    @tf.function
    def all_counts(mine):  # every worker's count: each puts its own at its index, the sum has them all
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(mine,)), axis=None)

    train_elements = _partition_elements(job["cache"], parts, settings, job["split"])
    own = sum(1 for _ in train_elements)
    counts = all_counts(tf.one_hot(index, workers, dtype=tf.float32) * own).numpy().astype(int).tolist()
    steps = math.ceil(max(counts) / job["batch_size"])
    started = time.perf_counter()
    epoch_ids, epoch_seconds, loss = [], [], math.nan
    for epoch in range(job["epochs"]):
        epoch_started = time.perf_counter()
        ids: list[str] = []
        for images, labels, weights, batch_ids in _batches(train_elements, job["size"], job["batch_size"],
                                                           pad_count(own, steps, job["batch_size"]),
                                                           job["seed"] * 1000 + epoch * workers + index):
            loss = float(step(images, labels, weights))
            ids.extend(i.decode() for i in batch_ids.numpy() if i)
        if len(ids) != own:
            raise WorkbenchError(f"worker {index} trained on {len(ids)} samples in epoch {epoch}, its partitions held "
                                 f"{own}: the cache changed while training; train again")
        epoch_ids.append(ids)
        epoch_seconds.append(round(time.perf_counter() - epoch_started, 2))
    train_seconds = time.perf_counter() - started
    correct = seen = 0
    val_ids: list[str] = []
    if job["val_split"] is not None:
        val = _partition_elements(job["cache"], parts, settings, job["val_split"])
        for images, labels, _, batch_ids in _batches(val, job["size"], job["batch_size"], 0, None):
            predicted = net(images, training=False).numpy().argmax(axis=1)
            correct += int((predicted == labels.numpy()).sum())
            seen += len(predicted)
            val_ids.extend(i.decode() for i in batch_ids.numpy())
    digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in net.weights)).hexdigest()
    result = {"index": index, "partitions": parts, "counts": counts, "steps_per_epoch": steps, "loss": loss,
              "epoch_ids": epoch_ids, "val_correct": correct, "val_seen": seen, "val_ids": val_ids,
              "weights_sha256": digest, "train_seconds": train_seconds, "startup_seconds": started - began,
              "epoch_seconds": epoch_seconds}
    (work / f"worker-{index}.json").write_text(json.dumps(result))


# ------------------------------------------------------------------------------- CLI


def _int_list(raw: str) -> list[int]:
    try:
        return [int(p) for p in raw.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a comma-separated list of partition numbers") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.train_keras_partitions", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", help="a dataset ingested into ignite")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--model", default="small", choices=["tiny", "small"])
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--partitions", type=_int_list, default=None, help="train on these partitions only (0,1,5)")
    p.add_argument("--split", default="train")
    p.add_argument("--val-split", default="val")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads per worker")
    p.add_argument("--results-dir", default=None)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # a worker process (the launcher's)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--parts", type=_int_list, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    if args.worker is not None:
        worker_main(args.worker, Path(args.work), args.parts or [])
        return None
    if not args.dataset:
        raise WorkbenchError("--dataset is required: a dataset ingested into ignite")
    return train(args.dataset, workers=args.workers, epochs=args.epochs, batch_size=args.batch_size, model=args.model,
                 size=args.size, num_classes=args.num_classes, lr=args.lr, seed=args.seed, partitions=args.partitions,
                 split=args.split, val_split=args.val_split, threads=args.threads, results_dir=args.results_dir)


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
