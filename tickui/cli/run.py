"""`tickui run`: the engine driven by the ticker, headless, until a signal or `--for`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tickui.cli.run_report import JSON, LINES, QUIET, RunReport, print_stderr, summary_line
from tickui.common.clock import Clock, ScaledClock, SystemClock
from tickui.common.errors import BadInput
from tickui.common.kafka import preflight
from tickui.common.logfilter import RedactingFilter
from tickui.common.procs import stop_on_signals
from tickui.common.redact import redact_data
from tickui.common.timeutil import MICROS, format_duration, parse_duration
from tickui.engine import EngineChange
from tickui.runtime.assembly import assemble, check_dispatch
from tickui.runtime.settings import DispatchSettings, MetricsSettings, Settings
from tickui.runtime.simulate import SimulatedDispatcher, TimeLapse
from tickui.store import DATABASE_ERRORS, Store
from tickui.ticks.config import TickerConfig, kafka_access, ticker_flags
from tickui.ticks.config import build as build_ticker


@dataclass(frozen=True)
class RunOptions:
    duration: float | None
    scale: float
    stop_grace: int
    ticker: TickerConfig
    real_commands: bool = False
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    shown: str = LINES  # the runs' lines: LINES, JSON or QUIET
    metrics: str | None = None  # serve Prometheus metrics here (host:port)


def options(args: argparse.Namespace, settings: Settings) -> RunOptions:
    if args.duration is not None and args.duration <= 0:
        raise BadInput("for", f"{args.duration:g} is not a positive number of seconds")
    if not 1 <= args.time_scale <= 3600:
        raise BadInput("time-scale", f"{args.time_scale:g} is out of range (1 to 3600)")
    ticker = build_ticker(settings.raw, settings.env, ticker_flags(args))
    grace = settings.engine.stop_grace
    if args.stop_grace:
        grace = parse_duration(args.stop_grace, "stop-grace")
    real = bool(getattr(args, "real_commands", False))
    dispatch = settings.dispatch
    if getattr(args, "dispatch", None):
        dispatch = dataclasses.replace(dispatch, mode=args.dispatch)
    check_dispatch(dispatch, kafka_access(ticker))
    shown = LINES
    if getattr(args, "json", False):
        shown = JSON
    elif getattr(args, "quiet", False):
        shown = QUIET
    metrics = args.metrics or settings.metrics.listen
    return RunOptions(args.duration, args.time_scale, grace, ticker, real, dispatch, shown, metrics)


def setup_logging(quiet: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tickui: %(asctime)s %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger("tickui")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False


async def run_headless(args: argparse.Namespace, settings: Settings, db: Path | str) -> int:
    opts = options(args, settings)
    setup_logging(quiet=opts.shown == QUIET)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = [signal.SIGINT, signal.SIGTERM]
    if opts.scale != 1 and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signals.append(signal.SIGHUP)  # a closed terminal must not leave the copy behind
    # from here on, a signal ends the run through the cleanup below
    with stop_on_signals(loop, stop.set, signals):
        if opts.scale == 1:
            return await _run(settings, opts, db, stop, None)
        lapse = TimeLapse(db, opts.scale, opts.real_commands)
        try:
            await asyncio.to_thread(lapse.__enter__)
            print(lapse.banner(), file=sys.stderr, flush=True)
            return await _run(settings, opts, lapse.copy, stop, lapse)
        finally:
            lapse.close()


async def _run(
    settings: Settings,
    opts: RunOptions,
    db: Path | str,
    stop: asyncio.Event,
    lapse: TimeLapse | None,
) -> int:
    log = logging.getLogger("tickui.run")
    access = kafka_access(opts.ticker)
    if access is not None and lapse is None:
        await preflight(access)  # a refused login or certificate: one line, exit 1
    store = await Store.open(db)
    try:
        if settings.tasks is not None:
            report = await store.sync_tasks(settings.tasks, SystemClock().now())
            if report.added or report.updated or report.removed:
                log.info(
                    "config synced: added %s, updated %s, removed %s",
                    report.added,
                    report.updated,
                    report.removed,
                )
        clock: Clock = ScaledClock(opts.scale) if opts.scale != 1 else SystemClock()
        dispatcher = None
        if lapse is not None and not lapse.real_commands:
            dispatcher = SimulatedDispatcher(store, clock, lapse.profiles)
        # H: alert hooks ([[hook]]) beside the engine and the ticker; None without any.
        # M: Prometheus metrics served beside them (--metrics, [metrics] listen).
        engine, ticker, hooks, metrics = assemble(
            store,
            clock,
            dataclasses.replace(settings, metrics=MetricsSettings(opts.metrics)),
            opts.ticker,
            dispatch=opts.dispatch,
            kafka=access,
            dispatcher=dispatcher,
        )
        loop = asyncio.get_running_loop()
        report = RunReport(store, engine.owner, clock.now(), opts.shown)
        engine.subscribe(report.listen)
        faults: list[str] = []

        def engine_fault(change: EngineChange) -> None:
            status = engine.status()
            # the first few faults name the trouble; the rest repeat it
            fault = change.status and status.result == "error" and status.detail not in faults
            if fault and len(faults) < 5:
                faults.append(status.detail or "error")

        engine.subscribe(engine_fault)
        reached = asyncio.Event()
        if opts.duration:
            loop.call_later(opts.duration, lambda: (reached.set(), stop.set()))
        await engine.start()
        report.start()
        status = engine.status()
        if status.lease_state == "standby":
            log.info("standby: lease held by %s", status.holder)
        else:
            where = f"a copy of {lapse.source}" if lapse else db
            log.info("running on %s as %s", where, engine.owner)
        if engine.dispatcher.remote and access is not None:
            log.info("runs go to workers through kafka %s", access.bootstrap)
        try:
            await ticker.start()
            await stop.wait()
            why = "--for reached" if reached.is_set() else "stopping"
            await _say_stopping(store, engine.owner, why, opts.stop_grace, log)
        finally:
            running = ticker.metrics()  # its health while it ran: stopped is never healthy
            await ticker.stop()
            report.stopping = True
            await engine.stop(opts.stop_grace / MICROS)
            await report.close()
            if report.cancelled_at_stop:
                names = ", ".join(sorted({o.task for o in report.cancelled_at_stop}))
                log.warning(
                    "cancelled %d run(s) still going after the %s grace: %s",
                    len(report.cancelled_at_stop),
                    format_duration(opts.stop_grace) if opts.stop_grace else "0s",
                    names,
                )
            if hooks is not None:  # H: the last changes' alerts, bounded
                await hooks.close()
            if metrics is not None:
                await metrics.close()
        ticking = ticker.metrics().to_json()
        ticking["healthy"] = running.healthy
        ticking["is_healthy"] = running.is_healthy()
        session = report.summary()
        problems = []
        if session["failed"]:
            problems.append(f"{session['failed']} run(s) failed")
        ended = engine.status()
        if ended.result == "error" and ended.detail not in faults:
            faults.append(ended.detail or "error")
        problems += [f"engine: {fault}" for fault in faults]
        if running.ticks_failed:
            problems.append(f"{running.ticks_failed} tick(s) failed to publish")
        session["healthy"] = not problems
        session["problems"] = "; ".join(problems) or None
        final = {"session": session, "engine": ended.to_json(), "ticker": ticking}
        if hooks is not None:  # H: deliveries by outcome, and events dropped
            final["hooks"] = hooks.status()
    finally:
        await store.close()
    if lapse is not None:
        final["time_lapse"] = await asyncio.to_thread(lapse.summary)
    if opts.shown == JSON:
        print(json.dumps(redact_data({"event": "summary", **session})), flush=True)
    print_stderr(summary_line(session))
    print(json.dumps(redact_data(final)), file=sys.stderr)
    return 0


async def _say_stopping(
    store: Store, owner: str, why: str, grace: int, log: logging.Logger
) -> None:
    """At the stop: which of this engine's runs it waits for, and for how long."""
    try:
        mine = [o for o in await store.active_occurrences() if o.owner == owner]
    except DATABASE_ERRORS:  # the stop goes on; the engine reports the database itself
        mine = []
    if not mine:
        log.info("%s: stopping", why)
        return
    names = ", ".join(sorted({o.task for o in mine}))
    if grace:
        log.warning(
            "%s: waiting up to %s (--stop-grace) for %d running run(s) (%s), then cancelling them",
            why, format_duration(grace), len(mine), names,
        )  # fmt: skip
    else:
        log.warning("%s: cancelling %d running run(s) (%s)", why, len(mine), names)
