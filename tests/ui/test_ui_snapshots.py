"""Snapshot tests of the dashboard's screens (deterministic clock and data).

`snap_compare` runs the app itself, so these tests are synchronous. Accept an intended
change with `pytest tests/test_ui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path

from tickui.ui import sample, screenshots

SIZE = (130, 36)


def test_main_screen(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.main_scene, terminal_size=SIZE)


def test_main_screen_small_terminal(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.main_scene, terminal_size=(80, 24))


def test_task_detail(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.detail_scene, terminal_size=SIZE)


def test_add_form_with_a_validation_error(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.add_error_scene, terminal_size=SIZE)


def test_help(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.help_scene, terminal_size=SIZE)


def test_standby(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db", standby=True)
    assert snap_compare(app, run_before=sample.standby_scene, terminal_size=SIZE)


def test_breaker_open(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.breaker_open_scene, terminal_size=SIZE)


def test_light_theme(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.light_scene, terminal_size=SIZE)


def test_edit_form(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.edit_scene, terminal_size=SIZE)


def test_edit_form_small_terminal(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.edit_scene, terminal_size=(80, 24))


def test_cancel_question(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.cancel_scene, terminal_size=SIZE)


def test_help_small_terminal(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.help_scene, terminal_size=(80, 24))


def test_workers(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.workers_scene, terminal_size=SIZE)


def test_make_screenshots_writes_each_screen(tmp_path: Path) -> None:
    out = tmp_path / "shots"
    # The live `busy` scene waits for its slots and its breaker in real time (some 12 s): the
    # other screens are shot meanwhile, by a second `make screenshots` naming them.
    names = [name for name, _, _ in screenshots.SHOTS]
    shooters = [
        subprocess.Popen(
            [sys.executable, "-m", "tickui.ui.screenshots", str(out), *part],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for part in (["busy"], [name for name in names if name != "busy"])
    ]
    try:
        for shooter in shooters:
            _, stderr = shooter.communicate(timeout=120)
            assert shooter.returncode == 0, stderr
    finally:
        for shooter in shooters:
            if shooter.poll() is None:
                shooter.kill()
                shooter.wait()
    shown = {p.stem: html.unescape(p.read_text()).replace("\xa0", " ") for p in out.glob("*.svg")}
    assert set(shown) == set(names)
    assert {"busy", "main", "run-output", "detail", "add-form", "breaker-open", "workers",
            "grid", "timeline"} <= set(shown)  # fmt: skip
    assert "Tasks · grid · export-orders · run " in shown["grid"] and "↻" in shown["grid"]
    assert "Tasks · timeline" in shown["timeline"] and "busiest" in shown["timeline"]
    busy = shown["busy"]
    assert "running" in busy and "failed" in busy and "OPEN" in busy
    assert "Run 2 of export-orders" in shown["run-output"]
    assert "backup-db" in shown["main"] and "Circuit breaker" in shown["main"]
    assert "next 10 fire times" in shown["detail"].lower()
    workers = shown["workers"]
    assert "Workers" in workers and "build-01" in workers and "WORKER" in workers
    assert "worker build-02: 3 forged commands" in workers  # "refused" may wrap
    breaker = shown["breaker-open"]
    assert "SIMULATING PUBLISH FAILURES" in breaker and "OPEN" in breaker


def test_history_grid(snap_compare, tmp_path: Path) -> None:
    """v on a history: each outcome's glyph and colour, the cursor on a retried failure."""
    app = sample.sample_app(tmp_path / "t.db", history=True)
    assert snap_compare(app, run_before=sample.grid_scene, terminal_size=SIZE)
