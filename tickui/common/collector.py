"""The cyclic garbage collector, paused for a burst of work."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """The cyclic collector off for the block, then as it was (on only if it was on).

    Objects are still freed as soon as nothing refers to them; only cycles wait for the
    collector, which runs again, once, after the block. For a burst that makes and drops
    many objects that live a while (a scan of thousands of due tasks: tasks, plans, runs,
    events), where the collector would otherwise walk them time and again while they live.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
