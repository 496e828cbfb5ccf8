"""A directory as a `Store`: keys are files, writes are atomic (temporary name, then rename).

Leftover ``*.wbtmp`` files of a killed writer are never listed and are removed by `remove_temporaries`.
Files are not fsynced: this guards against a killed process, not a power cut.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.storage.base import MultipartUpload, ObjectInfo, Store

TMP_SUFFIX = ".wbtmp"


class DirStore(Store):
    """Keys as files under a directory; atomic writes by rename. Metadata is not kept."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise WorkbenchError(
                f"cannot write {path}: {exc.strerror or exc} (check the folder's space and rights)"
            ) from exc

    def get(self, key: str) -> tuple[bytes, dict[str, str]]:
        try:
            return self._path(key).read_bytes(), {}
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None
        except OSError as exc:
            raise WorkbenchError(f"cannot read {self._path(key)}: {exc.strerror or exc}") from exc

    def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        path = self._path(key)
        try:
            if etag is not None and _etag(path.stat()) != etag:
                raise WorkbenchError(f"{path} changed while it was read: read it again")
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None
        except OSError as exc:
            raise WorkbenchError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if len(data) != end - start:
            raise WorkbenchError(f"{path}: got {len(data)} bytes for range {start}-{end - 1} (shorter than expected)")
        return data

    def head(self, key: str) -> ObjectInfo:
        try:
            stat = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            raise KeyError(key) from None
        return ObjectInfo(stat.st_size, _etag(stat))

    def multipart(self, key: str) -> MultipartUpload:
        return _DirUpload(self, key)

    def list(self, under: str = "") -> Iterator[tuple[str, int]]:
        top = self._path(under) if under else self.root
        for dirpath, _dirs, files in os.walk(top):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                if name.endswith(TMP_SUFFIX):
                    continue
                try:
                    size = os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue
                yield (name if rel_dir == "." else f"{rel_dir}/{name}"), size

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def prune(self) -> None:
        """Remove empty folders bottom-up, the root included."""
        if not self.root.is_dir():
            return
        for dirpath, _dirs, _files in os.walk(self.root, topdown=False):
            with contextlib.suppress(OSError):  # not empty
                os.rmdir(dirpath)

    def remove_temporaries(self) -> int:
        """Delete ``*.wbtmp`` files a killed writer left behind; returns how many."""
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.endswith(TMP_SUFFIX):
                    Path(dirpath, name).unlink(missing_ok=True)
                    removed += 1
        return removed


def _etag(stat: os.stat_result) -> str:
    """A version tag for a file: a rewrite (rename over it) changes inode or mtime."""
    return f"{stat.st_ino:x}-{stat.st_mtime_ns:x}-{stat.st_size:x}"


class _DirUpload(MultipartUpload):
    """Parts as hidden temporary files beside the target, joined and renamed into place on `complete`."""

    def __init__(self, store: DirStore, key: str) -> None:
        self.path = store._path(key)
        self.stem = f".{self.path.name}.{uuid.uuid4().hex[:8]}"

    def _part(self, number: int) -> Path:
        return self.path.with_name(f"{self.stem}.{number:05d}{TMP_SUFFIX}")

    def put_part(self, number: int, data: bytes) -> str:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._part(number).write_bytes(data)
        except OSError as exc:
            raise WorkbenchError(f"cannot write {self.path}: {exc.strerror or exc} (check space and rights)") from exc
        return str(number)

    def complete(self, tags: list[tuple[int, str]]) -> None:
        joined = self.path.with_name(f"{self.stem}{TMP_SUFFIX}")
        try:
            with open(joined, "wb") as out:
                for number, _ in sorted(tags):
                    with open(self._part(number), "rb") as part:
                        shutil.copyfileobj(part, out)
            os.replace(joined, self.path)
        except OSError as exc:
            joined.unlink(missing_ok=True)
            raise WorkbenchError(f"cannot write {self.path}: {exc.strerror or exc} (check space and rights)") from exc
        finally:
            self.abort()

    def abort(self) -> None:
        for part in self.path.parent.glob(f"{self.stem}.*{TMP_SUFFIX}"):
            part.unlink(missing_ok=True)
