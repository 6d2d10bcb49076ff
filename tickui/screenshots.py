"""`make screenshots`: SVGs of the dashboard's main screens into screenshots/.

The same fixed scenes as the snapshot tests (tickui.ui.sample), so pictures and tests agree.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tickui.ui import sample

SHOTS = [
    ("main", sample.main_scene, False),
    ("detail", sample.detail_scene, False),
    ("add-form", sample.add_scene, False),
    ("add-form-error", sample.add_error_scene, False),
    ("breaker-open", sample.breaker_open_scene, False),
    ("standby", sample.standby_scene, True),
]
SIZE = (130, 36)


async def shoot(out: Path) -> list[Path]:
    written = []
    for name, scene, standby in SHOTS:
        with tempfile.TemporaryDirectory() as scratch:
            app = sample.sample_app(Path(scratch) / "shot.db", standby=standby)
            async with app.run_test(size=SIZE) as pilot:
                await scene(pilot)
                await pilot.pause(0.2)
                path = app.save_screenshot(f"{name}.svg", str(out))
                written.append(Path(path))
    return written


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("screenshots")
    out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(shoot(out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
