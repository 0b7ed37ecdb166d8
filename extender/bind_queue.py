"""The bind verb's slots: binds in flight to the API server at once, the others waiting in arrival order on
the event loop, and the refusals of those that would wait past kube-scheduler's patience."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any


class BindQueue:
    """The binds in flight (at most ``slots``: KSO_BIND_THREADS) and those waiting for a slot, in arrival order, on
    the event loop. A bind still waiting ``max_wait_s`` after it arrived leaves the queue unposted (``enter``
    returns "expired"), at that moment rather than when a slot frees: kube-scheduler has stopped waiting at its
    httpTimeout, and a Binding posted after that only races its own binder. A bind that would not get a slot in
    time, by the binds ahead of it and the recent binds' duration (``took``, a moving average), is refused at
    once ("full"), as is one beyond ``max_waiting``: kube-scheduler then binds it itself at once instead of
    after the wait, and a stalled API server cannot fill the connection cap that filter and prioritize share (a
    503 there makes kube-scheduler place pods without kso)."""

    def __init__(self, slots: int, max_wait_s: float, max_waiting: int) -> None:
        self.free = slots
        self.max_wait_s = max_wait_s
        self.max_waiting = max_waiting
        self.waiting: deque[asyncio.Future[bool]] = deque()
        self.slots = slots
        self.took = 0.0  # seconds a posted bind held its slot, moving average (0 until one has been posted)

    async def enter(self, arrived: float) -> str:
        """"ok" (a slot is held: call ``leave`` after the bind), "expired" or "full". ``arrived``: the
        request's time.perf_counter() on arrival."""
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return "ok"
        left = self.max_wait_s - (time.perf_counter() - arrived)
        if left <= 0:
            return "expired"
        if len(self.waiting) >= self.max_waiting or (len(self.waiting) // self.slots + 1) * self.took > left:
            return "full"
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[bool] = loop.create_future()
        self.waiting.append(granted)
        timer = loop.call_later(left, self._expire, granted)
        try:
            return "ok" if await granted else "expired"
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled() and granted.result():
                self.leave()  # granted just as the request was cancelled: hand the slot on
            elif granted in self.waiting:
                self.waiting.remove(granted)
            raise
        finally:
            timer.cancel()

    def _expire(self, granted: asyncio.Future[bool]) -> None:
        if not granted.done():
            self.waiting.remove(granted)
            granted.set_result(False)

    def leave(self, took: float | None = None) -> None:
        """Give the slot to the longest-waiting bind, or back; ``took``: seconds the bind held it."""
        if took is not None:
            self.took = took if self.took == 0.0 else 0.9 * self.took + 0.1 * took
        while self.waiting:
            granted = self.waiting.popleft()
            if not granted.done():
                granted.set_result(True)
                return
        self.free += 1


class RateLimitedLog:
    """A warning at most every ``every_s`` seconds, saying how many were held back since the last."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0) -> None:
        self.logger, self.every_s = logger, every_s
        self.last = -float("inf")
        self.held = 0

    def warning(self, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.held += 1
            return
        held, self.held, self.last = self.held, 0, now
        self.logger.warning(msg + (f" ({held} more like it in the last {self.every_s:.0f} s not logged)" if held else ""),
                            *args)
