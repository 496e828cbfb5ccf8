"""The ceilings' digest lines: parsed into key -> SHA-256, compared so one wrong byte or one swapped pair shows."""

from __future__ import annotations

import hashlib
import json

import pytest

from workbench.bench.native_ceilings import digest_mismatches, parse_digests, sample_digest
from workbench.errors import WorkbenchError

A, B = sample_digest(b"first image"), sample_digest(b"second image")


def _line(digest: str, key: str) -> str:
    return f"sha256 {digest} {json.dumps(key)}"


def test_sample_digest_is_sha256_hex():
    assert sample_digest(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_digest_lines_parse_by_key_and_other_lines_are_ignored():
    stdout = "\n".join([_line(A, "class_1/img 0.jpg"), "some log line", _line(B, 'odd "key"\\x'),
                        '{"samples": 2, "bytes": 10}'])
    assert parse_digests(stdout) == {"class_1/img 0.jpg": A, 'odd "key"\\x': B}
    assert parse_digests('{"samples": 0}') == {}


@pytest.mark.parametrize("line", [f"sha256 {A[:-1]} \"k\"", f"sha256 {A.upper()} \"k\"", f"sha256 {A} k",
                                  f"sha256 {A} 7", f"sha256 {A}"])
def test_a_malformed_digest_line_is_one_clear_line(line):
    with pytest.raises(WorkbenchError, match="line 1 is not 'sha256 <64 hex> <JSON string key>'") as err:
        parse_digests(line)
    assert "\n" not in str(err.value)


def test_a_key_read_twice_in_one_pass_is_an_error():
    with pytest.raises(WorkbenchError, match="'k' was read twice"):
        parse_digests(f"{_line(A, 'k')}\n{_line(A, 'k')}")


def test_equal_maps_have_no_mismatch():
    assert digest_mismatches({"a": A, "b": B}, {"b": B, "a": A}) == []


def test_one_flipped_byte_in_one_sample_is_a_mismatch_of_that_key():
    data = bytearray(b"second image")
    data[3] ^= 0x01
    assert digest_mismatches({"a": A, "b": B}, {"a": A, "b": sample_digest(bytes(data))}) == [
        f"b: read {B[:12]}, expected {sample_digest(bytes(data))[:12]}"]


def test_a_swapped_pair_and_missing_or_extra_keys_are_mismatches():
    assert [m.split(":")[0] for m in digest_mismatches({"a": B, "b": A}, {"a": A, "b": B})] == ["a", "b"]
    assert digest_mismatches({"a": A}, {"a": A, "b": B}) == ["missing b"]
    assert digest_mismatches({"a": A, "c": B}, {"a": A}) == ["unexpected c"]
