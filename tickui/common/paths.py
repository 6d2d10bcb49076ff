"""Paths as a person reads them."""

from __future__ import annotations

from pathlib import Path


def short_path(path: object) -> str:
    """A path as a person reads it: the home folder as ~."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if text.startswith(home + "/") else text
