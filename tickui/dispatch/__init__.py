"""Dispatchers start runs and report what happens to them as runtime events."""

from tickui.dispatch.base import (
    Dispatcher,
    DispatchFailure,
    Fence,
    Job,
    NotStarted,
    Receipt,
)
from tickui.dispatch.output import read_tail
from tickui.dispatch.subprocess import SubprocessDispatcher

__all__ = [
    "DispatchFailure",
    "Dispatcher",
    "Fence",
    "Job",
    "NotStarted",
    "Receipt",
    "SubprocessDispatcher",
    "read_tail",
]
