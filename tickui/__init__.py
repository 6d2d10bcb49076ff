"""tickui: a terminal dashboard that hosts a local job scheduler."""

__version__ = "0.1.0"
