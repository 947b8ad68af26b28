"""Items cross from a worker thread to the event loop with as few wake-ups of the loop as the
consumer allows: each wake-up costs the thread that sends it the interpreter lock."""

import asyncio
import threading

from teleo_server.workers import Handoff


class _CountingLoop:
    """The running loop, counting the wake-ups scheduled from other threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.wakes = 0

    def call_soon_threadsafe(self, *args):
        self.wakes += 1
        return self.loop.call_soon_threadsafe(*args)


def test_items_put_while_the_loop_is_busy_arrive_in_order_with_one_wake_up():
    async def main():
        loop = _CountingLoop(asyncio.get_running_loop())
        handoff = Handoff(loop)
        producer = threading.Thread(target=lambda: [handoff.put(i) for i in range(1000)])
        producer.start()
        producer.join()  # the loop is blocked here: no wake-up has been taken yet
        return await handoff.take(), loop.wakes

    items, wakes = asyncio.run(main())
    assert items == list(range(1000))
    assert wakes == 1


def test_an_item_put_without_a_wake_up_waits_for_the_next_one():
    async def main():
        loop = _CountingLoop(asyncio.get_running_loop())
        handoff = Handoff(loop)
        waiting = asyncio.ensure_future(handoff.take())
        await asyncio.sleep(0.05)  # the consumer now waits for a wake-up
        t = threading.Thread(target=handoff.put, args=("stage",), kwargs={"wake": False})
        t.start()
        t.join()
        await asyncio.sleep(0.3)
        early = waiting.done()
        threading.Thread(target=handoff.put, args=("result",)).start()
        return early, await asyncio.wait_for(waiting, 10), loop.wakes

    early, items, wakes = asyncio.run(main())
    assert not early
    assert items == ["stage", "result"]
    assert wakes == 1


def test_also_runs_on_the_loop_with_its_own_wake_up_even_with_one_on_its_way():
    async def main():
        loop = _CountingLoop(asyncio.get_running_loop())
        handoff = Handoff(loop)
        ran_on = []

        def produce():
            handoff.put("first")  # schedules a wake-up
            handoff.put("last", also=lambda: ran_on.append(threading.get_ident()))  # and so does this one

        t = threading.Thread(target=produce)
        t.start()
        t.join()
        items = await handoff.take()
        await asyncio.sleep(0.05)  # the loop runs what the wake-ups scheduled
        return items, list(ran_on), threading.get_ident(), loop.wakes

    items, ran_on, loop_thread, wakes = asyncio.run(main())
    assert items == ["first", "last"]
    assert ran_on == [loop_thread]
    assert wakes == 2


def test_no_item_is_lost_or_reordered_while_producer_and_consumer_interleave():
    n = 20_000
    done = object()

    async def main():
        loop = _CountingLoop(asyncio.get_running_loop())
        handoff = Handoff(loop)

        def produce():
            for i in range(n):
                handoff.put(i, wake=i % 3 != 0)
            handoff.put(done)

        threading.Thread(target=produce).start()
        got = []
        while not got or got[-1] is not done:
            got.extend(await asyncio.wait_for(handoff.take(), 10))
            await asyncio.sleep(0)  # let the producer run between takes
        return got[:-1], loop.wakes

    got, wakes = asyncio.run(main())
    assert got == list(range(n))
    assert 1 <= wakes < n
