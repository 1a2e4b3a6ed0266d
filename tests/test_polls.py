"""The pure poll judgement (triggers._polls): fence and order checks, the reasons the
timeline shows, a refused fire keeping the state, and quiet runs checked by hypothesis
against an oracle of the modes written here from DESIGN "Conditions (three-valued)"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from watchkeeper.triggers import (
    ConditionMode,
    ConditionState,
    Decision,
    DefinitionFacts,
    Evaluation,
    StoredCondition,
    Verdict,
    admitted,
    judge_poll,
    quiet_run,
    refused,
)

T0 = datetime(2026, 6, 1, tzinfo=UTC)
KEY = "k" * 64
ACTIVE = DefinitionFacts("active", 3, 2)


def evaluation(verdict: Verdict) -> Evaluation:
    return Evaluation(verdict, f"{verdict.value}: X 9 USD <= 10 USD", ())


def judge(stored: StoredCondition | None, verdict: Verdict, *, at: datetime = T0,
          current: DefinitionFacts | None = ACTIVE,
          mode: ConditionMode = ConditionMode.EVERY_EDGE) -> object:
    return judge_poll(current=current, claimed_fence=3, claimed_revision=2, stored=stored,
                      condition_key=KEY, mode=mode, cooldown=timedelta(hours=1), slot_at=at,
                      read_at=at, evaluation=evaluation(verdict))


def test_a_changed_fence_or_revision_is_fenced_out_and_stores_nothing() -> None:
    """Another fence, another revision, a cancelled or missing definition: fenced_out,
    with what changed in the reason, and no state to store."""
    for current, said in [(DefinitionFacts("active", 4, 2), "fence 3 -> 4"),
                          (DefinitionFacts("active", 3, 5), "revision 2 -> 5"),
                          (DefinitionFacts("cancelled", 3, 2), "status cancelled"),
                          (None, "it no longer exists")]:
        judgement = judge(None, Verdict.TRUE, current=current)
        assert judgement.action == "fenced_out" and judgement.state is None  # type: ignore[attr-defined]
        assert said in judgement.reason  # type: ignore[attr-defined]


def test_an_older_poll_decided_after_a_later_one_is_superseded() -> None:
    """A stored state that has seen 01:00 makes the 00:30 poll superseded; a state kept
    under another condition key does not (it is not this condition's)."""
    stored = StoredCondition(KEY, ConditionState(True), T0 + timedelta(hours=1))
    judgement = judge(stored, Verdict.FALSE, at=T0 + timedelta(minutes=30))
    assert judgement.action == "superseded" and judgement.state is None  # type: ignore[attr-defined]
    assert judgement.reason.startswith("overtaken: the poll of 2026-06-01T01:00:00Z")  # type: ignore[attr-defined]
    other = StoredCondition("x" * 64, ConditionState(True), T0 + timedelta(hours=1))
    assert judge(other, Verdict.TRUE, at=T0 + timedelta(minutes=30)).action == "fired"  # type: ignore[attr-defined]


def test_reasons_and_a_refused_fire() -> None:
    """A quiet poll's reason is the evaluation's with the machine's; an admitted fire
    stores the edge's state, a refused one the state from before (nothing latches)."""
    quiet = judge(None, Verdict.FALSE)
    assert quiet.reason == "false: X 9 USD <= 10 USD (false: re-armed)"  # type: ignore[attr-defined]
    assert quiet.state == ConditionState(False)  # type: ignore[attr-defined]
    fire = judge(None, Verdict.TRUE, mode=ConditionMode.FIRST_MATCH)
    assert fire.fires  # type: ignore[attr-defined]
    done = admitted(fire, evaluation(Verdict.TRUE), ConditionMode.FIRST_MATCH)  # type: ignore[arg-type]
    assert (done.state, done.complete) == (ConditionState(True, True, T0), True)
    assert done.reason == "first true: first_match fires; true: X 9 USD <= 10 USD"
    denied = refused(fire, Decision.DENIED_BUDGET, "budget exhausted")  # type: ignore[arg-type]
    assert (denied.action, denied.state, denied.complete) == (
        "denied_budget", ConditionState(), False)
    assert denied.reason == "first true: first_match fires, but budget exhausted"


def oracle(start: ConditionState, verdicts: list[Verdict], mode: ConditionMode,
           cooldown: timedelta) -> tuple[int, bool | None]:
    """How many polls (one an hour from T0) stay quiet before the first that fires or
    completes, and the last definite verdict after them, from the DESIGN's words."""
    if mode is ConditionMode.FIRST_MATCH and start.latched:
        return 0, start.last_definite  # a latched first_match completes at its next poll
    last = start.last_definite
    for n, verdict in enumerate(verdicts):
        at = T0 + timedelta(hours=n)
        if verdict is Verdict.UNKNOWN:
            continue  # neither fires, arms nor disarms
        if verdict is Verdict.FALSE:
            last = False
            continue
        if mode is ConditionMode.FIRST_MATCH:
            return n, last  # the first true fires
        if last is not True:  # an edge
            inside = start.last_fired_at is not None and at < start.last_fired_at + cooldown
            if not inside:
                return n, last
        last = True  # staying true, or a suppressed edge
    return len(verdicts), last


@given(st.lists(st.sampled_from(list(Verdict)), max_size=30),
       st.sampled_from(list(ConditionMode)), st.sampled_from([None, True, False]),
       st.booleans(), st.integers(0, 40), st.integers(0, 10))
def test_a_quiet_run_stops_at_the_first_poll_that_acts(
        verdicts: list[Verdict], mode: ConditionMode, last: bool | None, latched: bool,
        fired_hours_ago: int, cooldown_hours: int) -> None:
    """quiet_run judges polls while they are quiet: its length and the state it ends
    with match the oracle, and each judgement is judge_poll's for the state before it."""
    cooldown = timedelta(hours=cooldown_hours) if mode is ConditionMode.EVERY_EDGE \
        else timedelta(0)
    start = ConditionState(last, latched and mode is ConditionMode.FIRST_MATCH,
                           T0 - timedelta(hours=fired_hours_ago))
    stored = StoredCondition(KEY, start, T0 - timedelta(hours=1))
    polls = [(T0 + timedelta(hours=n), T0 + timedelta(hours=n), evaluation(v))
             for n, v in enumerate(verdicts)]
    judged, after = quiet_run(stored, condition_key=KEY, mode=mode, cooldown=cooldown,
                              definition=ACTIVE, polls=polls)
    count, definite = oracle(start, verdicts, mode, cooldown)
    assert len(judged) == count
    assert all(j.action in ("none", "suppressed_cooldown") for j in judged)
    assert after is not None and after.state.last_definite == definite
    assert after.state.last_fired_at == start.last_fired_at  # nothing fired
    state = stored
    for (at, _, e), j in zip(polls, judged, strict=False):
        again = judge_poll(current=ACTIVE, claimed_fence=3, claimed_revision=2, stored=state,
                           condition_key=KEY, mode=mode, cooldown=cooldown, slot_at=at,
                           read_at=at, evaluation=e)
        assert again == j
        state = StoredCondition(KEY, j.state, at)  # type: ignore[arg-type]
