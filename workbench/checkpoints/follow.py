"""Follow a running job's TensorBoard event files on ``ignite://`` (or any fsspec URL) from another process.

TensorBoard opens files through TensorFlow's gfile, which knows no ``ignite://``; so this mirrors the event
files under a directory URL into a local directory TensorBoard (or ``tf.compat.v1.train.summary_iterator``)
reads, polling every `interval` seconds::

    python -m workbench.checkpoints.follow ignite://RUNS/run1/events /tmp/tb/run1 &
    tensorboard --logdir /tmp/tb

`LiveEventWriter` (`workbench.checkpoints.live_events`) replaces a remote file with a longer version of
itself at each flush, so a poll appends only the bytes past the local copy's end (a ranged read: only
the chunks holding them travel), which is how TensorBoard expects a file to grow. A remote file that got
shorter was replaced by another: the local copy is written anew. Subdirectories stay subdirectories
(TensorBoard's runs); only files named like event files (``*tfevents*``) are mirrored.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from workbench.checkpoints.files import url_fs
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage.ignite_chunks import FileChanged


class EventFollower:
    """Mirror the event files under `source_url` into `target_dir` (see the module docstring)."""

    def __init__(self, source_url: str, target_dir: str | Path, settings: Settings | None = None) -> None:
        self.source_url = source_url
        self.fs, self.root = url_fs(source_url, settings)
        self.target = Path(target_dir)

    def poll(self) -> int:
        """Bring every mirrored file up to date once; the number of bytes appended or rewritten."""
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return 0  # the run has not written its first flush yet
        moved = 0
        for path, info in sorted(found.items()):
            if info.get("type") != "file" or "tfevents" not in path.rsplit("/", 1)[-1]:
                continue
            relative = path[len(self.root):].lstrip("/") if path != self.root else path.rsplit("/", 1)[-1]
            moved += self._update(path, self.target / relative, int(info.get("size") or 0))
        return moved

    def _update(self, path: str, local: Path, listed_size: int) -> int:
        have = local.stat().st_size if local.exists() else 0
        if listed_size == have:
            return 0
        try:
            with self.fs.open(path, "rb") as remote:
                size = remote.size
                start = have if size >= have else 0
                remote.seek(start)
                data = remote.read(size - start)
        except (FileNotFoundError, FileChanged):
            return 0  # removed or replaced between the listing and the read: the next poll sees its new state
        local.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "ab" if start else "wb") as out:
            out.write(data)
        return len(data)

    def follow(self, interval: float = 2.0, until: Callable[[], bool] | None = None) -> None:
        """`poll` every `interval` seconds until `until()` is true (forever without one)."""
        while True:
            self.poll()
            if until is not None and until():
                return
            time.sleep(interval)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m workbench.checkpoints.follow", description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="the run's event directory: ignite://CACHE/dir, s3://..., a path")
    p.add_argument("target", help="the local directory TensorBoard reads")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
    p.add_argument("--once", action="store_true", help="one poll, then exit")
    args = p.parse_args(argv)
    if args.interval <= 0:
        raise SystemExit(f"error: --interval {args.interval}: use a number of seconds > 0")
    try:
        follower = EventFollower(args.source, args.target)
        follower.follow(args.interval, until=(lambda: True) if args.once else None)
    except WorkbenchError as exc:
        raise SystemExit(f"error: {exc}") from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
