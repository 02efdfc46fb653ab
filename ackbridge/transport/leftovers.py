"""What a stopped event loop still holds: tasks left pending are cancelled and unwound.

The rule: a loop that will never run again cancels its pending tasks (a client whose
close did not finish, e.g. a nats-py subscription's reader) and runs them until they have
unwound, as ``asyncio.run`` does, before it is closed. Left pending, a task is destroyed
later by the garbage collector, on whatever thread and during whatever test, and a
coroutine that raises as it is closed then is an unraisable exception.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("ackbridge")


def cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and unwind the pending tasks of *loop*, which has stopped for good."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    try:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    except Exception as exc:  # a stop must not fail on what it is dropping
        log.debug("ackbridge: unwinding %d task(s) left on a stopped loop: %s", len(pending), exc)
