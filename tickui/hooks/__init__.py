"""Alert hooks (`[[hook]]` in tickui.toml): tell a URL or a command when runs fail, recover,
are missed, a task is paused, the tick breaker opens or closes, or a person changes a task
(the operator audit)."""

from __future__ import annotations

from tickui.hooks.config import EVENTS, HookConfig, parse_hook
from tickui.hooks.events import HookEvent
from tickui.hooks.service import HookService, attach

__all__ = ["EVENTS", "HookConfig", "HookEvent", "HookService", "attach", "parse_hook"]
