"""`workbench_native.read_files` on real files, and the fs loader's `read_many` with and without it."""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from heap_checks import glibc_only, in_a_thread_heap

from workbench.errors import WorkbenchError
from workbench.loaders import fs

native = pytest.importorskip("workbench_native", reason="the extension is built by `make venv` (needs cargo)")


@pytest.fixture
def files(tmp_path):
    contents = [os.urandom(n) for n in (0, 1, 4096, 110_000, 3 * 2**20 + 7)]
    paths = []
    for i, data in enumerate(contents):
        path = tmp_path / f"f{i}.bin"
        path.write_bytes(data)
        paths.append(path)
    return paths, contents


def test_reads_every_file_whole_and_in_order_as_bytes(files):
    paths, contents = files
    got = native.read_files([str(p) for p in reversed(paths)])
    assert got == list(reversed(contents))
    assert all(type(body) is bytes for body in got)


def test_a_missing_file_is_file_not_found_naming_it(files, tmp_path):
    paths, _ = files
    missing = str(tmp_path / "gone.bin")
    with pytest.raises(FileNotFoundError) as raised:
        native.read_files([str(paths[1]), missing, str(paths[2])])
    assert raised.value.filename == missing and raised.value.errno == errno.ENOENT


def test_a_folder_is_an_oserror_naming_it(tmp_path):
    with pytest.raises(OSError) as raised:
        native.read_files([str(tmp_path)])
    assert raised.value.filename == str(tmp_path)


def test_read_many_is_the_same_with_and_without_the_extension(files, monkeypatch):
    paths, contents = files
    assert fs.read_many(paths, ["x"] * len(paths)) == contents
    monkeypatch.setattr(fs, "load_extension", lambda slower: None)
    assert fs.read_many(paths, ["x"] * len(paths)) == contents


def test_read_many_names_the_missing_sample_as_read_bytes_does(files, tmp_path):
    paths, _ = files
    with pytest.raises(WorkbenchError, match=r"missing file .*gone\.bin \(sample 7\): deleted since the ingest"):
        fs.read_many([paths[0], tmp_path / "gone.bin"], ["sample 6", "sample 7"])


@glibc_only
def test_files_read_on_a_pool_thread_land_in_the_reserving_threads_heap(tmp_path):
    contents = [os.urandom(n) for n in (20_000, 50_000, 90_000)]
    paths = [str(tmp_path / f"h{i}.bin") for i in range(len(contents))]
    for path, data in zip(paths, contents, strict=True):
        with open(path, "wb") as out:
            out.write(data)
    with ThreadPoolExecutor(1) as pool:
        unreserved = pool.submit(native.read_files, paths).result()
        reserved = native.reserve(np.array([len(c) for c in contents], dtype=np.int64))  # in this (main) thread
        got = pool.submit(native.read_files, paths, reserved).result()
    assert unreserved == got == contents
    assert all(in_a_thread_heap(body) for body in unreserved)
    assert not any(in_a_thread_heap(body) for body in got)


def test_a_file_whose_size_changed_since_it_was_reserved_is_read_whole_all_the_same(files):
    paths, contents = files
    sizes = [len(c) for c in contents]
    sizes[2] += 1  # grown, shrunk, absent: each file still read as it is now
    sizes[3] -= 1
    got = native.read_files([str(p) for p in paths], native.reserve(np.array(sizes[:-1], dtype=np.int64)))
    assert got == contents


def test_a_reservation_is_used_once(files):
    """A second read with the same reservation makes new objects: it never writes into bytes already handed out."""
    paths, contents = files
    reserved = native.reserve(np.array([len(c) for c in contents], dtype=np.int64))
    first = native.read_files([str(p) for p in paths], reserved)
    changed = [os.urandom(len(c)) for c in contents]  # same sizes, other bytes
    for path, data in zip(paths, changed, strict=True):
        path.write_bytes(data)
    assert native.read_files([str(p) for p in paths], reserved) == changed
    assert first == contents


def test_reserve_refuses_a_negative_length():
    with pytest.raises(ValueError, match="length -1 < 0"):
        native.reserve(np.array([3, -1], dtype=np.int64))


def test_the_fs_loader_reserves_only_what_the_journal_sized():
    assert fs.reserve([3, None]) is None
    assert fs.reserve([3, 4]) is not None
