"""The recovered step when parameter digests collide (NaN, frozen or all-zero parameters; issue 16 item 7)."""

from __future__ import annotations

from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.trial import compare


def steps(count, first=1, digest=None):
    out = [{"step": i, "ts": float(i), "loss": [float("nan")], "pfp": "same", "rng": {"torch": f"t{i}"}} for i in range(first, first + count)]
    if digest:
        out[0]["digest"] = digest
    return out


FROZEN = ProcessLog(pid=1, steps=steps(30, digest="frozen"),
                    saves=[Save(index=i, step=s, path="/w/c.pt", digest="frozen", ts=float(i), ok=True)
                           for i, s in enumerate((10, 20, 30), 1)])


def test_a_recurring_digest_is_told_apart_by_how_many_steps_the_resumed_run_took():
    table = compare.digest_table(FROZEN)
    resumed = RunLog([ProcessLog(pid=2, steps=steps(10, digest="frozen"))])
    assert compare.recovery(resumed, 0, "", 20, table).recovered_step == 20


def test_then_by_the_random_streams_at_its_first_step_and_otherwise_it_is_not_guessed():
    table = compare.digest_table(FROZEN)
    crashed_early = [{**s, "rng": {"torch": f"t{s['step'] + 10}"}} for s in steps(3, digest="frozen")]
    assert compare.recovery(RunLog([ProcessLog(pid=2, steps=crashed_early)]), 1, "", 20, table).recovered_step == 10
    unknowable = [{**s, "rng": {"torch": "elsewhere"}} for s in steps(3, digest="frozen")]
    assert compare.recovery(RunLog([ProcessLog(pid=2, steps=unknowable)]), 1, "", 20, table).outcome == "unknown-state"


def test_a_non_finite_loss_is_named():
    findings = compare.loss_findings(FROZEN)
    assert [f.kind for f in findings] == ["non-finite-loss"] and findings[0].details["step"] == 1
    assert compare.loss_findings(ProcessLog(pid=3, steps=[{"loss": [0.5]}])) == []
