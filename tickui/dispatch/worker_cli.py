"""`tickui worker`: run commands the engine sends over Kafka (helper W builds it)."""

from __future__ import annotations

import argparse

from tickui.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's options; kept light: nothing heavy is imported to build the parser."""
    parser.add_argument("--kafka", metavar="BOOTSTRAP")


def main(args: argparse.Namespace, settings: Settings) -> int:
    raise NotImplementedError("tickui worker")
