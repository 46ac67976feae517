"""The worker's app run for each of the front's requests (front.py), and what every front
shares to run it.

A request the front cannot serve with no coroutine (`Front._at_once`) runs the app with its
`Cycle`: a whole `POST /` at once until it must wait (eager.py), any other in a task. A run
that had to wait is kept in `APPS` until it is over, so the worker's stop (gateway/worker/
server.py) can give each its grace, as hypercorn does with its own, and so are the at-once
path's openings that wait for the pace with no task (`end_apps`).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Callable

from gateway.config.options import Config
from gateway.worker.http import eager
from gateway.worker.http.cycle import Cycle
from gateway.worker.http.head_checks import head_cap
from gateway.worker.http.head_deadlines import HeadDeadlines
from gateway.worker.pace import OpeningPace

APPS: set[asyncio.Task] = set()  # the app runs of the front's requests that had to wait (eager.py)
Over = Callable[[Cycle, "BaseException | None"], None]  # the front hears a run is over: (cycle, what it raised)


class FrontSettings:
    """What every connection's front shares: the worker's app and the bounds it applies, and
    its loop (on Python 3.11 `asyncio.get_running_loop()` is a getpid system call each time)."""

    __slots__ = ("app", "config", "incomplete_cap", "h2", "loop", "heads")

    def __init__(self, app, config: Config, h2: bool = True):
        self.app, self.config, self.incomplete_cap = app, config, head_cap(config)
        self.loop = asyncio.get_running_loop()
        self.h2 = h2  # HTTP/2 is offered: its guarantee holds on this hypercorn (serving.py)
        self.heads = HeadDeadlines(self.loop, config.header_timeout)  # every connection's header timeout


def run(settings: FrontSettings, cycle: Cycle, scope: dict, at_once: bool, over: Over) -> None:
    """The app's run for `cycle`'s request: at once until it waits (`at_once`: its body is in
    the scope), else in a task; `over` is called when it ends, within this call or later."""
    app = settings.app(scope, cycle.receive, cycle.send)
    if at_once:
        try:
            task = eager.start(settings.loop, app)
        except Exception as error:
            return over(cycle, error)
        if task is None:
            return over(cycle, None)  # over within this call (eager.py)
    else:
        task = settings.loop.create_task(app)
    APPS.add(task)
    task.add_done_callback(partial(_done, over, cycle))


def _done(over: Over, cycle: Cycle, task: asyncio.Task) -> None:
    APPS.discard(task)
    over(cycle, None if task.cancelled() else task.exception())


async def end_apps(apps: set[asyncio.Task], pace: OpeningPace, grace: float) -> None:
    """The server stops: as hypercorn does with its own, give every app run of the front's
    still going (an opening that waits on the sequencer or the pace, a request's answer; an
    open stream has none: the hub ends it), and every opening that waits for the pace with no
    task (the at-once path's), `grace` seconds to end; then what still waits for the pace is
    ended (`OpeningPace.end_waiting`: as a cancelled run, with no answer of the app's) and
    what is left cancelled."""
    await asyncio.wait([*apps, pace.settled()], timeout=grace)
    pace.end_waiting()
    for task in list(apps):
        task.cancel()
    await asyncio.sleep(0)  # the openings called back on the last turn run, in their order
    if apps:
        await asyncio.wait(list(apps))
