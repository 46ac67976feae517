"""eager.start (gateway/worker/http/eager.py): a coroutine runs at once, and only what is left
after its first wait becomes a task, with the result, exceptions and cancellation an ordinary
task would have."""

import asyncio

import pytest

from gateway.worker.http import eager

pytestmark = pytest.mark.unit


def test_a_coroutine_that_never_waits_runs_within_the_call_and_makes_no_task():
    ran = []

    async def opening():
        ran.append("all")

    async def main():
        before = len(asyncio.all_tasks())
        assert eager.start(asyncio.get_running_loop(), opening()) is None
        assert ran == ["all"] and len(asyncio.all_tasks()) == before

    asyncio.run(main())


def test_one_that_waits_runs_up_to_its_wait_now_and_the_rest_in_a_task():
    steps = []

    async def opening(ready: asyncio.Future):
        steps.append("before")
        value = await ready
        steps.append(("after", value, asyncio.current_task() is not None))
        return "done"

    async def main():
        ready = asyncio.get_running_loop().create_future()
        task = eager.start(asyncio.get_running_loop(), opening(ready))
        assert steps == ["before"] and isinstance(task, asyncio.Task)
        ready.set_result(7)
        assert await task == "done"
        assert steps == ["before", ("after", 7, True)]

    asyncio.run(main())


def test_cancelling_the_task_cancels_the_wait_inside_the_coroutine():
    seen = []

    async def opening(ready: asyncio.Future):
        try:
            await ready
        except asyncio.CancelledError:
            seen.append("cancelled inside")
            raise

    async def main():
        ready = asyncio.get_running_loop().create_future()
        task = eager.start(asyncio.get_running_loop(), opening(ready))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled inside"] and ready.cancelled()

    asyncio.run(main())


def test_exceptions_come_out_of_the_call_before_a_wait_and_out_of_the_task_after_one():
    async def fails_now():
        raise ValueError("now")

    async def fails_later(ready: asyncio.Future):
        await ready
        raise KeyError("later")

    async def main():
        loop = asyncio.get_running_loop()
        with pytest.raises(ValueError):
            eager.start(loop, fails_now())
        ready = loop.create_future()
        task = eager.start(loop, fails_later(ready))
        ready.set_result(None)
        with pytest.raises(KeyError):
            await task

    asyncio.run(main())


def test_a_bare_yield_to_the_loop_is_passed_on_as_a_task_would():
    async def opening():
        await asyncio.sleep(0)
        return "after a turn"

    async def main():
        task = eager.start(asyncio.get_running_loop(), opening())
        assert await task == "after a turn"

    asyncio.run(main())


def test_the_eager_part_has_no_current_task_so_a_timeout_there_fails():
    """Why the app's eager part (a POST / whose body came whole) must await nothing that asks
    for a current task: tests/e2e/test_front_requests.py runs the real openings through it."""
    async def opening():
        async with asyncio.timeout(1):
            pass

    async def main():
        loop = asyncio.get_running_loop()
        raised = loop.create_future()

        def data_received():  # as the front's: a loop callback, no task running
            try:
                eager.start(loop, opening())
            except RuntimeError as error:
                raised.set_result(error)
            else:
                raised.set_result(None)
        loop.call_soon(data_received)
        assert isinstance(await raised, RuntimeError)

    asyncio.run(main())
