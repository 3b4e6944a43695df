"""Health checks and fallback, as a small state machine the stub drives.

After ``fallback_after`` consecutive failures (errors or timeouts) of the primary route, requests
go to the fallback route and the model reports itself degraded with the reason; after
``recover_after`` consecutive passes of the primary, requests go back.

Example:
    >>> state = FallbackState(HealthPolicy(fallback_after=2, recover_after=1))
    >>> state.record(False, "timeout"); state.record(False, "timeout"); state.degraded
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from trtforge.core.errors import InvalidArgument


@dataclass(frozen=True)
class HealthPolicy:
    """How often to check, how long a check may take, and when to switch (N failures, M passes)."""

    interval_s: float = 5.0
    timeout_s: float = 2.0
    fallback_after: int = 3
    recover_after: int = 3

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.timeout_s <= 0 or self.fallback_after < 1 or self.recover_after < 1:
            raise InvalidArgument(f"{self}: intervals must be > 0 and counts >= 1")


class FallbackState:
    """Consecutive failures and passes of the primary route, and whether we are degraded."""

    def __init__(self, policy: HealthPolicy) -> None:
        self.policy = policy
        self.failures = 0
        self.passes = 0
        self.degraded = False
        self.reason = ""
        self.fallbacks = 0
        self._lock = threading.Lock()

    def record(self, ok: bool, reason: str = "") -> bool:
        """Count one check of the primary; returns True when the active route changed."""
        with self._lock:
            if ok:
                self.failures, self.passes = 0, self.passes + 1
                if self.degraded and self.passes >= self.policy.recover_after:
                    self.degraded, self.reason = False, ""
                    return True
                return False
            self.passes, self.failures = 0, self.failures + 1
            if not self.degraded and self.failures >= self.policy.fallback_after:
                self.degraded, self.reason, self.fallbacks = True, reason, self.fallbacks + 1
                return True
            if self.degraded:
                self.reason = reason
            return False


class HealthWorker:
    """One thread that runs the health checks, one at a time, and stops when asked.

    A check that outlives ``timeout_s`` is reported as a failure and keeps its thread (an engine
    call cannot be interrupted); the next checks report it still running instead of starting
    another thread, so a hung engine costs one thread, not one per interval. ``stop()`` ends the
    thread once the check in progress returns.

    Example:
        >>> worker = HealthWorker()
        >>> worker.check(lambda: engine(*warm), timeout_s=2.0)    # '' when it passed, else the reason
        ''
        >>> worker.stop()
    """

    def __init__(self, name: str = "trtforge-health-check") -> None:
        self._state = threading.Condition()
        self._job: Callable[[], object] | None = None
        self._outcome = ""
        self._running = self._stopped = False
        self.thread = threading.Thread(target=self._loop, daemon=True, name=name)
        self.thread.start()

    def check(self, job: Callable[[], object], timeout_s: float) -> str:
        """Run ``job`` on the worker; '' when it passed, else the reason (error, timeout, still running)."""
        with self._state:
            if self._stopped:
                return "health checks are stopped"
            if self._running:
                return f"the previous health inference is still running (over {timeout_s:g} s)"
            self._job, self._running = job, True
            self._state.notify_all()
            if not self._state.wait_for(lambda: not self._running, timeout_s):
                return f"health inference took longer than {timeout_s:g} s"
            return self._outcome

    def _loop(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._job is not None or self._stopped)
                if self._stopped:
                    return
                job, self._job = self._job, None
            try:
                job()
                outcome = ""
            except Exception as exc:  # a health check reports any failure of the engine as a reason
                outcome = f"{type(exc).__name__}: {exc}"
            with self._state:
                self._outcome, self._running = outcome, False
                self._state.notify_all()

    def stop(self) -> None:
        with self._state:
            self._stopped = True
            self._state.notify_all()
