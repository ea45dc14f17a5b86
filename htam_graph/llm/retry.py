"""Bounded retries with exponential backoff and full jitter for transient backend failures.

SDK-level retries are switched off (max_retries=0) so that the number of attempts is ours, bounded and
countable in tests.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from htam_graph.errors import BackendError, StepInfraError

log = logging.getLogger(__name__)
T = TypeVar("T")


class TransientBackendError(BackendError):
    """A failure worth retrying (429, 529 overloaded, 5xx, a refused or reset connection). A read timeout is
    not one: the request reached the model, and sending the whole prompt again would bill it again."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` calls; waits grow as base * 2**n (capped), randomised by full jitter.

    A server's `retry-after` is honoured (capped by `max_delay_s`) instead of the computed wait.
    """

    max_attempts: int = 4
    base_delay_s: float = 2.0
    max_delay_s: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)
    # Told of every retry, in one line (the CLI shows it in its progress).
    notify: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, self.max_delay_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return self.rng.uniform(0.0, ceiling)


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy, *, what: str) -> T:
    """Call `fn`, retrying `TransientBackendError`; other errors pass through at once.

    After the last attempt fails, raises `BackendError` naming the attempts and the last error.
    """
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return fn()
        except TransientBackendError as e:
            if attempt == policy.max_attempts:
                raise BackendError(f"{what}: gave up after {attempt} attempts: {e}") from e
            wait_s = policy.delay_s(attempt, e.retry_after_s)
            message = (
                f"{what}: attempt {attempt}/{policy.max_attempts} failed ({e}); retrying in {wait_s:.1f} s"
            )
            if policy.notify is not None:
                policy.notify(message)
            else:
                log.warning("%s", message)
            policy.sleep(wait_s)
    raise AssertionError("unreachable")  # the loop returns or raises


_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


def status_error(what: str, status: int, detail: str, headers: Mapping[str, str] | None) -> BackendError:
    """The error for an HTTP error status: transient (retried) for 408/409/425/429/5xx/529, else permanent."""
    message = f"{what}: HTTP {status}: {detail}".strip()
    if status in _RETRYABLE_STATUS or status >= 500:
        return TransientBackendError(message, retry_after_s=retry_after_s(headers))
    return BackendError(message)


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds form only), or None."""
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP-date: fall back to our own backoff
    return None


def read_timeout(what: str, timeout_s: float) -> StepInfraError:
    """The error for a model that did not answer within the timeout: this step fails, it is not retried."""
    return StepInfraError(f"{what}: no answer within {timeout_s:g} s (--llm-timeout); not sent again")
