"""Bounded retries of one request: exponential backoff with jitter, transient errors only, one clear failure.

A loader wraps each per-request fetch (one row, one GET, one shard, one get_all batch) in
`RetryPolicy.call`, so a request that failed on a dropped connection, a timeout or a restarting server
is re-submitted for the same keys: the `in_flight` window still yields every key exactly once.
Permanent errors (missing keys or objects, refused credentials, bad input) are raised at once. When
the attempts or the time budget are spent, one WorkbenchError says what was given up and why.
"""

from __future__ import annotations

import errno
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, Field

from workbench.errors import WorkbenchError, with_type

T = TypeVar("T")

_NETWORK_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT,
                   errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENOTCONN, errno.ENETDOWN, errno.EHOSTDOWN}
# S3 answers that mean "try again" (throttling, a server starting up or failing over).
_S3_TRANSIENT_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                       "XMinioServerNotInitialized", "XMinioStorageFull", "503", "500", "502", "504"}


def _transient_types() -> tuple[type[BaseException], ...]:
    """Driver exceptions that mean "the path or the server failed, the request may succeed later"."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError, EOFError]
    try:
        from cassandra import OperationTimedOut, ReadTimeout, Unavailable
        from cassandra.cluster import NoHostAvailable
        from cassandra.connection import ConnectionBusy, ConnectionException, ConnectionShutdown

        found += [NoHostAvailable, OperationTimedOut, Unavailable, ReadTimeout, ConnectionException,
                  ConnectionShutdown, ConnectionBusy]
    except ImportError:
        pass
    try:
        from botocore.exceptions import ConnectionClosedError, ReadTimeoutError, ResponseStreamingError
        from botocore.exceptions import ConnectionError as BotoConnectionError  # Endpoint*, ConnectTimeout, ...

        found += [BotoConnectionError, ConnectionClosedError, ReadTimeoutError, ResponseStreamingError]
    except ImportError:
        pass
    try:
        from urllib3.exceptions import ProtocolError
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        found += [ProtocolError, Urllib3Timeout]
    except ImportError:
        pass
    try:
        from pyignite.exceptions import ReconnectError  # its SocketError is OSError: errno-checked below

        found += [ReconnectError]
    except ImportError:
        pass
    return tuple(found)


_TRANSIENT: tuple[type[BaseException], ...] | None = None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes (explicit `from`, or implicit context unless suppressed)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return seen


def _transient_one(exc: BaseException) -> bool:
    global _TRANSIENT
    if _TRANSIENT is None:
        _TRANSIENT = _transient_types()
    if isinstance(exc, _TRANSIENT):
        return True
    if isinstance(exc, OSError) and exc.errno in _NETWORK_ERRNOS:
        return True
    response = getattr(exc, "response", None)  # botocore ClientError: 5xx and throttling answers
    if type(exc).__name__ == "ClientError" and isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in _S3_TRANSIENT_CODES or int(status) >= 500
    return False


def is_transient(exc: BaseException) -> bool:
    """True when `exc` (or what caused it) is a network or server-availability failure worth retrying."""
    return any(_transient_one(e) for e in _chain(exc))


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `attempts` tries within `budget_s` seconds, sleeping base_s * 2^n (capped at max_s, jittered)."""

    attempts: int = 5
    base_s: float = 0.1
    max_s: float = 2.0
    budget_s: float = 30.0
    transient: Callable[[BaseException], bool] = field(default=is_transient, repr=False, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.base_s < 0 or self.max_s < 0 or self.budget_s < 0:
            raise ValueError("base_s, max_s and budget_s must be >= 0")

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """The pause before retry number `retry` (1, 2, ...): "equal jitter" in [cap/2, cap], cap <= max_s."""
        cap = min(self.max_s, self.base_s * (2 ** max(0, retry - 1)))
        return cap / 2 + (rng or random).uniform(0, cap / 2)

    def call(self, fn: Callable[[], T], what: str, *, first_error: BaseException | None = None,
             on_retry: Callable[[BaseException], None] | None = None) -> T:
        """`fn()`, retried on transient errors; permanent errors are raised unchanged.

        `first_error`: a failure of an attempt already made elsewhere (an asynchronous request), which
        counts as attempt 1. `on_retry(error)` runs before each new attempt (e.g. drop a broken connection).
        Raises WorkbenchError("gave up on <what> after N attempts in X s: <last error>") once the attempts
        or the budget are spent.
        """
        start = self.clock()
        attempt = 1 if first_error is not None else 0
        error = first_error
        while True:
            if error is not None:
                if not self.transient(error):
                    raise error
                elapsed = self.clock() - start
                pause = self.backoff(attempt)
                if attempt >= self.attempts or elapsed + pause > self.budget_s:
                    raise WorkbenchError(
                        f"gave up on {what} after {attempt} attempt{'s' if attempt != 1 else ''} in "
                        f"{elapsed:.1f} s: {with_type(error)}"
                    ) from error
                self.sleep(pause)
                if on_retry is not None:
                    on_retry(error)
            attempt += 1
            try:
                return fn()
            except Exception as exc:  # classified above: permanent ones are re-raised as is
                error = exc


# Five re-tries (~3 s of backoff) ride out resets and short outages while a server that is simply not
# there still fails within seconds. Riding out a full server restart (~15 s for Cassandra) needs more:
# raise `retries` and `retry_budget_s` (`workbench chaos` runs with 60 and 120 s).
RETRIES = 5


class RetryConfig(BaseModel):
    """The retry knobs of a loader config, declared once (mix into a LoaderConfig)."""

    retries: int = Field(RETRIES, ge=0, le=1000, description="re-tries of one request after a transient failure")
    retry_budget_s: float = Field(30.0, ge=0, description="time limit of one request and its re-tries")


def policy_of(config: BaseModel) -> RetryPolicy:
    """The policy of a loader config: its RetryConfig knobs, or the defaults for a config without them."""
    if isinstance(config, RetryConfig):
        return RetryPolicy(attempts=config.retries + 1, budget_s=config.retry_budget_s)
    return RetryPolicy(attempts=RETRIES + 1)
