"""`make screenshots`: SVGs of the dashboard's main screens into screenshots/.

The same fixed scenes as the snapshot tests (tickui.ui.sample), so pictures and tests agree.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tickui.ui import sample


def _fixed(db: Path):
    return sample.sample_app(db)


def _history(db: Path):
    return sample.sample_app(db, history=True)


def _standby(db: Path):
    return sample.sample_app(db, standby=True)


SHOTS = [
    ("busy", sample.busy_scene, sample.busy_app),  # live: real time from a fixed instant
    ("main", sample.main_scene, _fixed),
    ("grid", sample.grid_scene, _history),
    ("timeline", sample.timeline_scene, _fixed),
    ("run-output", sample.run_output_scene, _fixed),
    ("detail", sample.detail_scene, _fixed),
    ("add-form", sample.add_scene, _fixed),
    ("add-form-error", sample.add_error_scene, _fixed),
    ("breaker-open", sample.breaker_open_scene, _fixed),
    ("standby", sample.standby_scene, _standby),
    ("workers", sample.workers_scene, _fixed),
]
SIZE = (130, 36)


async def shoot(out: Path, only: list[str] | None = None) -> list[Path]:
    written = []
    for name, scene, make in SHOTS:
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            app = make(Path(scratch) / "shot.db")
            async with app.run_test(size=SIZE) as pilot:
                await scene(pilot)
                await pilot.pause(0.2)
                path = app.save_screenshot(f"{name}.svg", str(out))
                written.append(Path(path))
    return written


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("screenshots")
    out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(shoot(out, sys.argv[2:] or None)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
