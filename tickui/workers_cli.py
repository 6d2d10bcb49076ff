"""`tickui workers`: the workers the engine has heard from (helper K builds it)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true")


async def main(args: argparse.Namespace, path: Path) -> int:
    raise NotImplementedError("tickui workers")
