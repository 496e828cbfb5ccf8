"""TensorBoard event files that other processes can follow while the run writes them (``ignite://`` included).

`workbench.checkpoints.events.EventWriter` writes through one file object, so on ``ignite://`` its bytes
appear only when the writer closes: nothing can follow a running job. `LiveEventWriter` keeps the
file's records in memory and, every `flush_steps` steps or `flush_seconds` seconds, writes the whole
file again under the same name. Why a rewrite and not appended chunks: the ``ignite://`` file system
(`workbench.storage.ignite_fs`) has no append, but it replaces a file atomically (the manifest is
written last), so a reader always sees the file as of some flush: complete records, a prefix of the
final file, the very format TensorBoard reads, and at the end one ordinary event file (what
`pipelines.train_torch` writes). The cost of rewriting is bounded by rotation: past `rotate_bytes`
the writer starts a new event file (TensorBoard reads a run's files in name order, and a rotated
file never changes again). On a local directory the writer appends instead (TensorBoard tails a
growing local file; a local rewrite would truncate it under the reader).

TensorBoard reads neither ``ignite://`` nor fsspec, so a reader in another process follows the files
through `workbench.checkpoints.follow`, which mirrors them into a local directory by appending what
is new.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fsspec.implementations.local import LocalFileSystem

from workbench.checkpoints.events import FILE_VERSION, event, event_file_name, record
from workbench.checkpoints.files import check_url, join_url, open_url, url_fs
from workbench.config import Settings
from workbench.errors import WorkbenchError

ROTATE_BYTES = 1 << 20  # one rewrite uploads at most this much (scalars are ~50 bytes per tag and step)


class LiveEventWriter:
    """Scalars into event files in the directory `directory_url`, visible every `flush_steps` / `flush_seconds`
    (0 turns either off; `close` always flushes). `files` lists the URLs written, in order."""

    def __init__(self, directory_url: str, settings: Settings | None = None, *, flush_steps: int = 0,
                 flush_seconds: float = 5.0, rotate_bytes: int = ROTATE_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if flush_steps < 0 or flush_seconds < 0:
            raise WorkbenchError(f"event flushes every {flush_steps} steps / {flush_seconds} s: use numbers >= 0 "
                                 "(0 turns that trigger off)")
        if rotate_bytes < 1:
            raise WorkbenchError(f"rotate_bytes must be >= 1, got {rotate_bytes}")
        self.directory = check_url(directory_url, "--events-url", file=False)
        self.settings = settings
        self.flush_steps, self.flush_seconds, self.rotate_bytes = flush_steps, flush_seconds, rotate_bytes
        self.clock = clock
        self.append = isinstance(url_fs(directory_url, settings)[0], LocalFileSystem)
        self.files: list[str] = []
        self.flushes = 0
        self._closed = False
        self._start_file()

    def _start_file(self) -> None:
        suffix = f".{len(self.files):06d}" if self.files else ""  # same second as the previous file: sorts after it
        self.files.append(join_url(self.directory, event_file_name(suffix)))
        self._records = bytearray(record(event(time.time(), file_version=FILE_VERSION)))
        self._written = 0  # bytes of _records already in the file
        self._steps = 0
        self._flushed_at = self.clock()

    @property
    def url(self) -> str:
        """The event file being written now."""
        return self.files[-1]

    def scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        """One event of `values` at `step`; flushes when a trigger is due."""
        if self._closed:
            raise WorkbenchError(f"event file {self.url} is closed: open a new LiveEventWriter")
        if len(self._records) >= self.rotate_bytes:  # this file is full: its last version, then a new one
            self.flush()
            self._start_file()
        self._records += record(event(time.time() if wall_time is None else wall_time, step,
                                      scalars={tag: float(v) for tag, v in values.items()}))
        self._steps += 1
        if self.due():
            self.flush()

    def due(self) -> bool:
        """Whether a trigger has fired since the last flush."""
        if self.flush_steps and self._steps >= self.flush_steps:
            return True
        return bool(self.flush_seconds) and self.clock() - self._flushed_at >= self.flush_seconds

    def flush(self) -> None:
        """Make every event so far visible: the whole file written again (appended to, locally)."""
        if len(self._records) > self._written:
            if self.append:
                with open_url(self.url, "ab" if self._written else "wb", self.settings) as f:
                    f.write(bytes(self._records[self._written:]))
            else:
                with open_url(self.url, "wb", self.settings) as f:
                    f.write(bytes(self._records))
            self._written = len(self._records)
            self.flushes += 1
        self._steps, self._flushed_at = 0, self.clock()

    def close(self) -> None:
        """Flush what is left; the writer takes no more events."""
        if not self._closed:
            self._closed = True
            self.flush()

    def __enter__(self) -> LiveEventWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()  # also after an exception: the events up to a failure are what one looks at
