"""RetryPolicy: transient errors are retried with bounded backoff, permanent ones never, the budget ends it."""

from __future__ import annotations

import errno
import random

import pytest

from workbench.errors import WorkbenchError
from workbench.loaders.retry import RetryConfig, RetryPolicy, is_transient, policy_of


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def policy(clock: FakeClock, **kw) -> RetryPolicy:
    return RetryPolicy(sleep=clock.sleep, clock=clock, **kw)


def flaky(failures: list[BaseException], result="ok"):
    calls = []

    def fn():
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return result

    return fn, calls


def test_transient_errors_are_retried_then_succeed():
    clock = FakeClock()
    fn, calls = flaky([ConnectionResetError(errno.ECONNRESET, "reset"), TimeoutError("slow")])
    retried = []
    assert policy(clock).call(fn, "a read", on_retry=retried.append) == "ok"
    assert len(calls) == 3 and len(clock.sleeps) == 2 and len(retried) == 2


def test_wrapped_transient_error_is_retried():
    clock = FakeClock()
    wrapped = WorkbenchError("cannot reach S3")
    wrapped.__cause__ = ConnectionRefusedError(errno.ECONNREFUSED, "refused")
    fn, calls = flaky([wrapped])
    assert policy(clock).call(fn, "a GET") == "ok" and len(calls) == 2


@pytest.mark.parametrize("error", [KeyError("missing"), WorkbenchError("sample x not found"), ValueError("bad"),
                                   PermissionError(errno.EACCES, "denied")])
def test_permanent_errors_are_not_retried(error):
    clock = FakeClock()
    fn, calls = flaky([error])
    with pytest.raises(type(error)) as raised:
        policy(clock).call(fn, "a read")
    assert raised.value is error and len(calls) == 1 and not clock.sleeps


def test_driver_errors_are_classified():
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
    from cassandra import OperationTimedOut, Unavailable
    from cassandra.cluster import NoHostAvailable
    from pyignite.exceptions import ReconnectError

    assert is_transient(NoHostAvailable("no host", {}))
    assert is_transient(OperationTimedOut())
    assert is_transient(Unavailable("down"))
    assert is_transient(EndpointConnectionError(endpoint_url="http://x"))
    assert is_transient(ReadTimeoutError(endpoint_url="http://x"))
    assert is_transient(ReconnectError("gone"))
    assert is_transient(ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                                    "GetObject"))
    assert not is_transient(ClientError({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}},
                                        "GetObject"))
    assert not is_transient(ClientError({"Error": {"Code": "AccessDenied"},
                                         "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject"))
    assert not is_transient(FileNotFoundError(errno.ENOENT, "nope"))


def test_budget_exhausted_gives_one_clear_error():
    clock = FakeClock()

    def always():
        clock.now += 1.0  # every attempt takes a second
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    with pytest.raises(WorkbenchError, match=r"gave up on reading key k after \d+ attempts in [\d.]+ s: "
                                             r"ConnectionRefusedError") as raised:
        policy(clock, attempts=100, budget_s=5.0).call(always, "reading key k")
    assert clock.now <= 5.0 + 1.0
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)


def test_attempts_exhausted_gives_one_clear_error():
    clock = FakeClock()
    fn, calls = flaky([TimeoutError("t")] * 10)
    with pytest.raises(WorkbenchError, match="gave up on x after 3 attempts"):
        policy(clock, attempts=3).call(fn, "x")
    assert len(calls) == 3


def test_first_error_counts_as_an_attempt():
    clock = FakeClock()
    fn, calls = flaky([])
    assert policy(clock, attempts=2).call(fn, "x", first_error=TimeoutError("t")) == "ok"
    assert len(calls) == 1 and len(clock.sleeps) == 1
    with pytest.raises(WorkbenchError, match="after 1 attempt in"):
        policy(clock, attempts=1).call(fn, "x", first_error=TimeoutError("t"))
    with pytest.raises(KeyError):
        policy(clock).call(fn, "x", first_error=KeyError("k"))


def test_backoff_grows_and_is_bounded():
    p = RetryPolicy(base_s=0.1, max_s=2.0)
    rng = random.Random(1)
    for retry in range(1, 40):
        cap = min(2.0, 0.1 * 2 ** (retry - 1))
        for _ in range(20):
            assert cap / 2 <= p.backoff(retry, rng) <= cap
    assert p.backoff(1, rng) <= 0.1 and p.backoff(30, rng) <= 2.0
    clock = FakeClock()
    fn, _ = flaky([TimeoutError("t")] * 8)
    policy(clock, attempts=9, base_s=0.1, max_s=0.5, budget_s=100).call(fn, "x")
    assert max(clock.sleeps) <= 0.5 and len(clock.sleeps) == 8


def test_policy_of_loader_config():
    p = policy_of(RetryConfig(retries=2, retry_budget_s=3.0))
    assert p.attempts == 3 and p.budget_s == 3.0
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
