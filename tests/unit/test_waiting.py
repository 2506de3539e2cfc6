"""Waits are woken by the thread that publishes a change, never by a poll: a thread blocked
in wait_until and a coroutine awaiting wait_until_async look again only when notified, and
a notify costs one call into each waiting loop however many changes it announces."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from globalstore.waiting import Published, Wait, _Bell, wait_until, wait_until_async


class Told:
    """A value another thread changes, and tells of (or not)."""

    def __init__(self) -> None:
        self.published = Published()
        self.value = 0
        self.looks = 0

    def reached(self, wanted: int) -> Wait:
        def look() -> bool:
            self.looks += 1
            return self.value >= wanted

        return Wait(self.published, look)

    def set_later(self, value: int, delay: float, notify: bool = True) -> threading.Thread:
        def later() -> None:
            time.sleep(delay)
            self.value = value
            if notify:
                self.published.notify_waiters()

        thread = threading.Thread(target=later)
        thread.start()
        return thread


def test_a_thread_is_woken_by_the_notify() -> None:
    shared = Told()
    shared.set_later(1, 0.05).join()
    began = time.monotonic()
    setter = shared.set_later(2, 0.2)
    assert wait_until(shared.reached(2), 10)
    assert time.monotonic() - began < 5
    setter.join()
    assert shared.looks == 2  # once before the wait, once when woken: no poll between


def test_a_thread_looks_only_when_woken() -> None:
    shared = Told()
    began = time.monotonic()
    shared.set_later(1, 0.05, notify=False)
    assert wait_until(shared.reached(1), 0.5)  # seen by the last look, at the timeout
    assert time.monotonic() - began >= 0.5  # the change was never announced
    assert shared.looks == 2  # before the wait and at the timeout, nothing between


def test_a_coroutine_is_woken_by_another_threads_notify() -> None:
    shared = Told()

    async def main() -> tuple[bool, int]:
        ticks = 0

        async def tick() -> None:  # the loop keeps running other tasks meanwhile
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        shared.set_later(1, 0.3)
        reached = await wait_until_async(shared.reached(1), 10)
        ticker.cancel()
        return reached, ticks

    reached, ticks = asyncio.run(main())
    assert reached and ticks >= 10
    assert shared.looks == 2
    assert not shared.published._bells  # the bell is taken down: a notify costs nothing again


def test_a_coroutine_looks_only_when_woken() -> None:
    shared = Told()

    async def main() -> bool:
        shared.set_later(1, 0.05, notify=False)
        return await wait_until_async(shared.reached(1), 0.5)

    began = time.monotonic()
    assert asyncio.run(main())  # seen by the last look, at the timeout
    assert time.monotonic() - began >= 0.5
    assert shared.looks == 2


def test_a_coroutines_check_raises_and_its_bell_is_taken_down() -> None:
    published = Published()

    def stopped() -> None:
        raise RuntimeError("the store stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        asyncio.run(wait_until_async(Wait(published, lambda: False, stopped), 5))
    assert not published._bells


class _CountingLoop:
    def __init__(self, closed: bool = False) -> None:
        self.calls = 0
        self.closed = closed

    def call_soon_threadsafe(self, callback: Any) -> None:
        if self.closed:
            raise RuntimeError("Event loop is closed")
        self.calls += 1


def test_a_bell_calls_into_its_loop_once_per_look() -> None:
    async def make() -> _Bell:
        return _Bell(asyncio.get_running_loop())

    bell = asyncio.run(make())
    loop = _CountingLoop()
    bell.loop = loop  # type: ignore[assignment]
    bell.ring()
    assert loop.calls == 0  # not armed: its coroutine is not waiting
    bell.arm()
    for _ in range(1_000):  # a thousand batches applied before the loop runs the wake-up
        bell.ring()
    assert loop.calls == 1
    bell.loop = _CountingLoop(closed=True)  # type: ignore[assignment]
    bell.arm()
    bell.ring()  # a closed loop: nothing raised into the store's thread
