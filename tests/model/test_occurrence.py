"""The occurrence state machine and settlement from runtime events."""

from __future__ import annotations

import itertools

import pytest

from tickui.model.occurrence import (
    ACTIVE,
    DETAIL_MAX,
    RUN_CANCELED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_INTERRUPTED,
    RUN_TRANSITION,
    STATES,
    TERMINAL,
    Change,
    Progress,
    RuntimeEvent,
    apply_event,
    bound,
    can_move,
    fold_events,
)

CMD = "cmd-1"
RUN = "run-1"


def occ(state: str = "accepted", run_id: str | None = None, cursor: int = 0) -> Progress:
    return Progress(id=42, state=state, command_id=CMD, run_id=run_id, cursor=cursor)


def event(
    seq: int,
    type_: str,
    payload=None,
    *,
    run_id: str | None = RUN,
    command_id: str | None = CMD,
    at: int | None = None,
) -> RuntimeEvent:
    return RuntimeEvent(
        seq=seq,
        at=at if at is not None else 1_000 * seq,
        command_id=command_id,
        run_id=run_id,
        type=type_,
        payload=payload or {},
    )


def transition(seq: int = 1, **payload) -> RuntimeEvent:
    return event(seq, RUN_TRANSITION, payload)


# --------------------------------------------------------------------------- moves


ALLOWED = [
    ("claimed", "accepted"),
    ("claimed", "failed"),
    ("accepted", "running"),
    ("running", "succeeded"),
    ("running", "failed"),
    ("running", "cancelled"),
]

FORBIDDEN = [
    ("accepted", "claimed"),
    ("running", "claimed"),
    ("running", "accepted"),
    ("running", "running"),
    ("claimed", "claimed"),
    ("claimed", "succeeded"),
    ("claimed", "skipped"),
    ("running", "skipped"),
    ("accepted", "skipped"),
]


class TestMoves:
    def test_state_lists(self):
        assert set(ACTIVE) == {"claimed", "accepted", "running"}
        assert set(TERMINAL) == {"succeeded", "failed", "cancelled", "skipped"}
        assert set(STATES) == set(ACTIVE) | set(TERMINAL) | {"queued"}

    def test_a_queued_occurrence_starts_or_ends_unrun(self):
        assert {t for t in STATES if can_move("queued", t)} == {"claimed", "skipped", "cancelled"}

    @pytest.mark.parametrize(("source", "target"), ALLOWED)
    def test_allowed(self, source, target):
        assert can_move(source, target)

    @pytest.mark.parametrize(("source", "target"), FORBIDDEN)
    def test_forbidden(self, source, target):
        assert not can_move(source, target)

    @pytest.mark.parametrize(("source", "target"), itertools.product(TERMINAL, STATES))
    def test_terminal_states_never_change(self, source, target):
        assert not can_move(source, target)

    def test_unknown_states(self):
        assert not can_move("bogus", "running")
        assert not can_move("running", "bogus")

    def test_every_active_state_can_end(self):
        for source in ACTIVE:
            assert can_move(source, "failed")
            assert can_move(source, "cancelled")


# --------------------------------------------------------------------------- apply_event


class TestTransition:
    def test_binds_the_run_and_starts_it(self):
        before = occ("accepted")
        after, change = apply_event(
            before, transition(3, pid=100, pgid=100, pid_start=55, log_path="/l/42.log")
        )
        assert after == Progress(42, "running", CMD, RUN, 3)
        assert change == Change(
            42,
            3,
            "running",
            {
                "run_id": RUN,
                "started_at": 3_000,
                "pid": 100,
                "pgid": 100,
                "pid_start": 55,
                "log_path": "/l/42.log",
            },
        )

    def test_from_claimed(self):
        after, change = apply_event(occ("claimed"), transition(1))
        assert after.state == "running"
        assert after.run_id == RUN
        assert change.fields["started_at"] == 1_000

    def test_other_payload_keys_are_not_copied(self):
        _, change = apply_event(occ(), transition(1, secret="x", pid=9))
        assert "secret" not in change.fields
        assert change.fields["pid"] == 9

    def test_non_running_transition_only_binds(self):
        after, change = apply_event(occ("claimed"), transition(2, state="accepted"))
        assert after.state == "claimed"
        assert after.run_id == RUN
        assert change.state is None
        assert change.fields == {"run_id": RUN}
        assert change.cursor == 2

    def test_second_transition_when_running_does_not_restart(self):
        running = occ("running", run_id=RUN, cursor=1)
        after, change = apply_event(running, transition(2))
        assert after.state == "running"
        assert change.state is None
        assert "started_at" not in change.fields

    def test_transition_of_another_command_only_moves_the_cursor(self):
        other = event(5, RUN_TRANSITION, run_id="run-9", command_id="cmd-9")
        after, change = apply_event(occ("accepted"), other)
        assert after == Progress(42, "accepted", CMD, None, 5)
        assert change == Change(42, 5)


class TestSettle:
    def running(self, cursor: int = 1) -> Progress:
        return occ("running", run_id=RUN, cursor=cursor)

    def test_completed(self):
        after, change = apply_event(self.running(), event(2, RUN_COMPLETED, {"exit_code": 0}))
        assert after.state == "succeeded"
        assert after.cursor == 2
        assert change == Change(42, 2, "succeeded", {"exit_code": 0, "finished_at": 2_000})

    def test_completed_without_exit_code_is_zero(self):
        _, change = apply_event(self.running(), event(2, RUN_COMPLETED))
        assert change.fields["exit_code"] == 0

    def test_failed_with_exit_code(self):
        payload = {"exit_code": 3, "error_code": "EXIT_NONZERO", "detail": "exit status 3"}
        after, change = apply_event(self.running(), event(2, RUN_FAILED, payload))
        assert after.state == "failed"
        assert change.state == "failed"
        assert change.fields == {
            "exit_code": 3,
            "error_code": "EXIT_NONZERO",
            "detail": "exit status 3",
            "finished_at": 2_000,
        }

    def test_failed_timeout(self):
        payload = {"error_code": "TIMEOUT", "detail": "killed after 5s"}
        _, change = apply_event(self.running(), event(2, RUN_FAILED, payload))
        assert change.fields["error_code"] == "TIMEOUT"
        assert change.fields["exit_code"] is None

    def test_failed_without_code_gets_a_default(self):
        _, change = apply_event(self.running(), event(2, RUN_FAILED))
        assert change.fields["error_code"] == "RUN_FAILED"
        assert change.fields["detail"] is None

    def test_error_code_is_bounded(self):
        _, change = apply_event(self.running(), event(2, RUN_FAILED, {"error_code": "E" * 500}))
        assert change.fields["error_code"] == "E" * 64

    def test_canceled(self):
        payload = {"exit_code": -15, "detail": "engine_stopped"}
        after, change = apply_event(self.running(), event(2, RUN_CANCELED, payload))
        assert after.state == "cancelled"
        assert change == Change(
            42, 2, "cancelled", {"exit_code": -15, "detail": "engine_stopped", "finished_at": 2_000}
        )

    def test_interrupted_is_failed_interrupted(self):
        after, change = apply_event(self.running(), event(2, RUN_INTERRUPTED))
        assert after.state == "failed"
        assert change.fields["error_code"] == "INTERRUPTED"
        assert change.fields["detail"] == "run interrupted"

    def test_interrupted_keeps_its_detail(self):
        _, change = apply_event(self.running(), event(2, RUN_INTERRUPTED, {"detail": "host down"}))
        assert change.fields["detail"] == "host down"
        assert change.fields["error_code"] == "INTERRUPTED"

    def test_settle_from_accepted(self):
        after, change = apply_event(occ("accepted", run_id=RUN), event(4, RUN_COMPLETED))
        assert after.state == "succeeded"
        assert change.state == "succeeded"

    @pytest.mark.parametrize("type_", [RUN_COMPLETED, RUN_FAILED, RUN_CANCELED, RUN_INTERRUPTED])
    def test_event_of_another_run_only_moves_the_cursor(self, type_):
        other = event(7, type_, {"exit_code": 1}, run_id="run-2")
        after, change = apply_event(self.running(), other)
        assert after == Progress(42, "running", CMD, RUN, 7)
        assert change == Change(42, 7)

    def test_settle_before_the_run_is_bound_needs_our_command_id(self):
        # No run bound yet: a completion for another command cannot be ours...
        after, change = apply_event(occ("accepted"), event(2, RUN_COMPLETED, command_id="cmd-9"))
        assert after.state == "accepted"
        assert change == Change(42, 2)
        # ...but one that names our command settles it, and binds the run it names.
        after, change = apply_event(occ("accepted"), event(3, RUN_COMPLETED))
        assert after.state == "succeeded" and after.run_id == RUN
        assert change.state == "succeeded" and change.fields["run_id"] == RUN

    @pytest.mark.parametrize("state", TERMINAL)
    def test_terminal_occurrence_is_not_moved(self, state):
        done = occ(state, run_id=RUN, cursor=3)
        after, change = apply_event(done, event(4, RUN_FAILED, {"exit_code": 1}))
        assert after == done
        assert change == Change(42, 4)
        after, change = apply_event(done, transition(5))
        assert after.state == state
        assert change.state is None and change.fields == {}

    def test_unknown_event_type_only_moves_the_cursor(self):
        after, change = apply_event(self.running(), event(2, "run.progress", {"pct": 50}))
        assert after.state == "running"
        assert change == Change(42, 2)


class TestDetailBound:
    def test_short_detail_unchanged(self):
        assert bound("x" * DETAIL_MAX) == "x" * DETAIL_MAX
        assert bound(None) is None

    def test_long_detail_is_cut_to_the_limit(self):
        cut = bound("y" * 5000)
        assert DETAIL_MAX == 1024
        assert len(cut) == DETAIL_MAX
        assert cut.startswith("y" * 1000)
        assert cut.endswith("…")

    @pytest.mark.parametrize("type_", [RUN_FAILED, RUN_CANCELED, RUN_INTERRUPTED])
    def test_event_detail_is_bounded(self, type_):
        running = occ("running", run_id=RUN)
        _, change = apply_event(running, event(2, type_, {"detail": "z" * 10_000}))
        assert len(change.fields["detail"]) == DETAIL_MAX


# --------------------------------------------------------------------------- fold_events


class TestFold:
    def test_full_life_in_one_fold(self):
        events = [transition(1, pid=77), event(2, RUN_COMPLETED, {"exit_code": 0})]
        change = fold_events(occ("accepted"), events)
        assert change == Change(
            42,
            2,
            "succeeded",
            {"run_id": RUN, "started_at": 1_000, "pid": 77, "exit_code": 0, "finished_at": 2_000},
        )

    def test_stops_at_terminal(self):
        events = [
            transition(1),
            event(2, RUN_FAILED, {"exit_code": 2, "error_code": "EXIT_NONZERO"}),
            event(3, RUN_COMPLETED, {"exit_code": 0}),
            event(4, RUN_CANCELED),
        ]
        change = fold_events(occ("accepted"), events)
        assert change.state == "failed"
        assert change.cursor == 2  # the later events are not consumed
        assert change.fields["exit_code"] == 2
        assert change.fields["error_code"] == "EXIT_NONZERO"

    def test_ignores_events_at_or_before_the_cursor(self):
        running = occ("running", run_id=RUN, cursor=5)
        events = [
            event(4, RUN_COMPLETED, {"exit_code": 0}),
            event(5, RUN_FAILED, {"exit_code": 1}),
            event(6, RUN_CANCELED, {"detail": "by user"}),
        ]
        change = fold_events(running, events)
        assert change.state == "cancelled"
        assert change.cursor == 6
        assert change.fields["detail"] == "by user"

    def test_nothing_new_is_none(self):
        running = occ("running", run_id=RUN, cursor=5)
        assert fold_events(running, []) is None
        assert fold_events(running, [event(3, RUN_COMPLETED), event(5, RUN_FAILED)]) is None

    def test_only_foreign_events_move_the_cursor(self):
        running = occ("running", run_id=RUN, cursor=1)
        events = [event(2, RUN_COMPLETED, run_id="other"), event(9, RUN_FAILED, run_id="other")]
        assert fold_events(running, events) == Change(42, 9)

    def test_bind_then_settle_in_order_matters(self):
        # A completion naming only a run that is not bound yet cannot settle the occurrence.
        events = [event(1, RUN_COMPLETED, command_id=None), transition(2)]
        change = fold_events(occ("accepted"), events)
        assert change.state == "running"
        assert change.cursor == 2
        # Once settled by our command's completion, a later transition changes nothing.
        change = fold_events(occ("accepted"), [event(1, RUN_COMPLETED), transition(2)])
        assert change.state == "succeeded" and change.cursor == 1

    def test_already_terminal_consumes_nothing_useful(self):
        done = occ("succeeded", run_id=RUN, cursor=2)
        change = fold_events(done, [event(3, RUN_FAILED, {"exit_code": 1})])
        assert change == Change(42, 3)

    def test_interrupted_mid_run(self):
        events = [transition(1), event(2, RUN_INTERRUPTED, {"exit_code": None})]
        change = fold_events(occ("claimed"), events)
        assert change.state == "failed"
        assert change.fields["error_code"] == "INTERRUPTED"
        assert change.fields["started_at"] == 1_000
        assert change.fields["finished_at"] == 2_000


# --------------------------------------------------------------------------- ksadk's shape


def ks(seq: int, type_: str, payload=None, *, run_id: str | None = RUN, cause=CMD):
    """An event as ksadk's AgentControl writes it: no command id, the command as cause."""
    return RuntimeEvent(seq, 1_000 * seq, None, run_id, type_, payload or {}, cause)


class TestKsadkEvents:
    def test_causation_binds_the_run_and_starts_it(self):
        after, change = apply_event(occ("accepted"), ks(1, RUN_TRANSITION, {"state": "running"}))
        assert after == Progress(42, "running", CMD, RUN, 1)
        assert change.state == "running" and change.fields["run_id"] == RUN

    @pytest.mark.parametrize("state", ["paused", "waiting"])
    def test_paused_and_waiting_runs_have_started(self, state):
        _, change = apply_event(occ("accepted"), ks(1, RUN_TRANSITION, {"state": state}))
        assert change.state == "running"

    @pytest.mark.parametrize("state", ["queued", "completed", "failed", None, {"x": 1}])
    def test_other_transition_states_bind_only(self, state):
        after, change = apply_event(occ("accepted"), ks(1, RUN_TRANSITION, {"state": state}))
        assert after == Progress(42, "accepted", CMD, RUN, 1)
        assert change == Change(42, 1, None, {"run_id": RUN})

    def test_an_empty_command_id_is_none_so_the_cause_decides(self):
        """ksadk reads a missing id as "" (`str(getattr(env, "command_id", "") or "")`)."""
        empty = RuntimeEvent(1, 1_000, "", RUN, RUN_TRANSITION, {"state": "running"}, CMD)
        after, change = apply_event(occ("accepted"), empty)
        assert after == Progress(42, "running", CMD, RUN, 1) and change.state == "running"
        foreign = RuntimeEvent(1, 1_000, "", RUN, RUN_TRANSITION, {"state": "running"}, "x")
        assert apply_event(occ("accepted"), foreign)[0].state == "accepted"

    def test_another_cause_or_an_explicit_other_command_is_not_ours(self):
        for foreign in (
            ks(1, RUN_TRANSITION, cause="cmd-9"),
            ks(1, RUN_COMPLETED, cause="cmd-9"),
            RuntimeEvent(1, 1, "cmd-9", RUN, RUN_COMPLETED, {}, CMD),
        ):
            after, change = apply_event(occ("accepted"), foreign)
            assert after == Progress(42, "accepted", CMD, None, 1)
            assert change == Change(42, 1)

    def test_nested_error_settles_failed_with_its_code_and_message(self):
        error = {"code": "TOOL_TIMEOUT", "message": "tool took 30s"}
        events = [ks(1, RUN_TRANSITION), ks(2, RUN_FAILED, {"error": error}, cause=None)]
        change = fold_events(occ("accepted"), events)
        assert change.state == "failed"
        assert change.fields["error_code"] == "TOOL_TIMEOUT"
        assert change.fields["detail"] == "tool took 30s"
        assert change.fields["exit_code"] is None

    def test_flat_fields_win_over_nested_and_a_bare_error_is_the_detail(self):
        payload = {"error_code": "EXIT_NONZERO", "detail": "exit 2", "error": {"code": "X"}}
        _, change = apply_event(occ("running", run_id=RUN), ks(2, RUN_FAILED, payload))
        assert (change.fields["error_code"], change.fields["detail"]) == ("EXIT_NONZERO", "exit 2")
        _, change = apply_event(occ("running", run_id=RUN), ks(2, RUN_FAILED, {"error": "boom"}))
        assert (change.fields["error_code"], change.fields["detail"]) == ("RUN_FAILED", "boom")

    def test_message_is_redacted_then_bounded_and_code_bounded(self):
        error = {"code": "C" * 500, "message": "login with token=s3cr3t failed " + "y" * 9000}
        _, change = apply_event(occ("running", run_id=RUN), ks(2, RUN_FAILED, {"error": error}))
        assert "s3cr3t" not in change.fields["detail"]
        assert change.fields["detail"].startswith("login with token=")
        assert len(change.fields["detail"]) == DETAIL_MAX
        assert change.fields["error_code"] == "C" * 64

    @pytest.mark.parametrize("type_", [RUN_CANCELED, "run.cancelled"])
    def test_canceled_in_either_spelling_ends_cancelled(self, type_):
        error = {"code": "USER_CANCELED", "message": "stopped"}
        _, change = apply_event(occ("running", run_id=RUN), ks(3, type_, {"error": error}))
        assert change.state == "cancelled"
        assert (change.fields["error_code"], change.fields["detail"]) == (
            "USER_CANCELED",
            "stopped",
        )
        _, change = apply_event(occ("running", run_id=RUN), ks(3, type_))
        assert change.state == "cancelled" and "error_code" not in change.fields

    def test_interrupted_keeps_a_nested_code(self):
        error = {"code": "WORKER_LOST", "message": "node gone"}
        _, change = apply_event(
            occ("running", run_id=RUN), ks(3, RUN_INTERRUPTED, {"error": error})
        )
        assert (change.state, change.fields["error_code"]) == ("failed", "WORKER_LOST")

    def test_an_event_naming_our_command_and_no_run_settles_a_bound_run(self):
        _, change = apply_event(occ("running", run_id=RUN), ks(3, RUN_COMPLETED, run_id=None))
        assert change.state == "succeeded" and "run_id" not in change.fields

    def test_unknown_types_and_odd_payloads_only_move_the_cursor(self):
        running = occ("running", run_id=RUN)
        for odd in (
            ks(4, "run.progress", {"step": 1}),
            ks(4, "control.heartbeat"),
            RuntimeEvent(4, 4, None, RUN, RUN_TRANSITION, ["not", "a", "dict"], CMD),
        ):
            after, change = apply_event(running, odd)
            assert after.state == "running" and change.state is None
        # A non-object payload on a failure still settles it, with the defaults.
        bad = RuntimeEvent(5, 5, None, RUN, RUN_FAILED, ["x"], None)
        _, change = apply_event(running, bad)
        assert (change.state, change.fields["error_code"]) == ("failed", "RUN_FAILED")

    def test_terminal_never_changes(self):
        done = occ("failed", run_id=RUN, cursor=3)
        events = [ks(4, RUN_COMPLETED), ks(5, RUN_TRANSITION), ks(6, RUN_CANCELED)]
        change = fold_events(done, events)
        assert change.state is None and change.fields == {}
