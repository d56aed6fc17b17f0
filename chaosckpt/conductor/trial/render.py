"""How a trial reads to a person: one headline with its evidence, then findings and where the logs are."""

from __future__ import annotations

import os
from typing import List, Optional

from chaosckpt.conductor.disk import sweep
from chaosckpt.conductor.results.result import Finding, Trial
from chaosckpt.conductor.trial.verdict import DIVERGENCE_CAUSES, cause

REASONS = {
    "fault-not-triggered": "the fault never fired",
    "reference-failed": "the uninterrupted run failed",
    "timeout": "a run did not finish in time",
    "agent-not-loaded": "no chaosckpt agent reported from the job",
    "no-steps-recorded": "the job took no optimizer step chaosckpt could see",
    "stale-checkpoint": "the uninterrupted run resumed from a checkpoint already in the working directory",
    "baseline-nondeterministic": "the job is not deterministic, so its trajectory cannot be judged",
    "resume-took-no-steps": "the resumed job trained no further",
    "survivors": "processes of the job survived SIGKILL",
    "disk-full": "chaosckpt's own disk is full",
    "node-lost": "a node of the job stopped answering",
    "sweep-untried": "not every class of crash state was resumed",
    "journal-refused": "chaosckpt would not replay all of the job's durability journal",
    "slurm-job-ended": "the trial's Slurm job ended without a verdict",
    "interrupted": "chaosckpt was stopped before the trial ended",
}


def describe_error(error: str, loading: bool) -> str:
    """A resume error in the words a user needs: any failure to load a checkpoint makes it 'unreadable'."""
    if not loading:
        return error
    lowered = error.lower()
    marker = "failed finding central directory"
    if marker in lowered:
        return f"unreadable: {marker}"
    return f"unreadable: {error}"


def headline(trial: Trial) -> str:
    """The one line that says what happened, with its evidence."""
    name = trial.scenario
    if trial.status == "inconclusive":
        return f"INCONCLUSIVE {name}: {REASONS.get(trial.reason, trial.reason)}: {trial.detail}"
    verdict = "PASSED" if trial.passed else "FAILED"
    if trial.sweep is not None:
        bad = sweep.first_failed(trial.sweep)
        summary = next(f.message for f in trial.findings if f.kind == "sweep")
        if bad is None:
            return f"{verdict} {name} sweep: {summary}"
        return f"{verdict} {name} sweep: a crash after op {bad['op']} ({bad['operation']}) resumes as {bad['outcome']}; {summary}"
    lead = cause(trial)
    if lead is not None and lead.kind in ASYNC_LEADS:
        return f"{verdict} {name}: {ASYNC_LEADS[lead.kind](lead.details)}; {_story(trial, None)}"
    return f"{verdict} {name}: {_story(trial, lead)}"


ASYNC_LEADS = {
    "exit-with-save-in-flight": lambda d: (f"the uninterrupted run exited while its checkpoint of step {d['step']} "
                                           + ("was still being written in the background" if d.get("begun", True)
                                              else "was handed to its thread and not yet begun")
                                           + ", so it never landed"),
    "background-error-unobserved": lambda d: (f"the job never noticed the error that failed its background save "
                                              f"and trained {d['steps_after']} more "
                                              f"step{'s' if d['steps_after'] != 1 else ''}"),
}
"""Findings about asynchronous saves that lead a failed trial's headline, each in a few words (from its details)."""


def _none_good(trial: Trial) -> str:
    """Why no checkpoint was good when the fault hit: none had completed, or the job had deleted them."""
    deleted = next((f for f in trial.findings if f.kind == "rotation-before-complete" and not f.ignored), None)
    if deleted is None:
        return "no checkpoint had completed"
    return (f"no complete checkpoint was left (the job had deleted step {deleted.details['deleted_step']}'s "
            "while the next was being written)")


def _story(trial: Trial, lead: Optional[Finding]) -> str:
    """What the trial found after its verdict: the lead finding, or where the resume started and how it went."""
    outcome, lg = trial.outcome, trial.last_good_step
    last_good = f"the last good checkpoint was step {lg}" if lg is not None else _none_good(trial)
    if lead is not None and lead.kind == "resume-exited":
        return f"{lead.message}; {_resumed_from(trial)}"
    if lead is not None and lead.kind == "acknowledged-checkpoint-lost":
        return (f"{lead.message}; the checkpoint itself survived and the job resumed from it "
                f"(step {trial.recovered_step})")
    if lead is not None and lead.kind in ("emergency-save-torn", "exit-0-after-preemption"):
        return f"{lead.message}; {_story(trial, None)}"
    if lead is not None and lead.kind == "ranks-disagree":
        return f"{lead.message}; {last_good}"
    if outcome == "crashed":
        where = f" loading {trial.error_path}" if trial.error_path else ""
        return f"resume crashed{where} ({describe_error(trial.error or 'no error recorded', trial.error_path is not None)}); {last_good}"
    if outcome == "survived":
        if trial.error:
            return f"the job carried on past the fault, but a later resume failed ({trial.error})"
        if trial.reproduced:
            return (f"the job carried on past the fault, matched the uninterrupted run over "
                    f"{trial.compared_steps} steps, and a later resume still loaded its checkpoint")
        return (f"the job carried on past the fault but diverged from the uninterrupted run "
                f"at step {trial.first_divergent_step}")
    if outcome == "scratch":
        return f"the resumed job restarted from scratch; {last_good} ({trial.lost_steps} steps of work lost)"
    if outcome == "older":
        chose = next((f.message for f in trial.findings if f.kind == "resume-chose-older" and not f.ignored), None)
        return (f"resumed from step {trial.recovered_step}, older than the last good checkpoint "
                f"(step {lg}): {trial.lost_steps} steps of work lost" + (f"; {chose}" if chose else ""))
    if outcome == "unknown-state":
        taken = next((f.message for f in trial.findings if f.kind == "resumed-other-weights" and not f.ignored), None)
        return ("the resumed job started from a state no run recorded "
                f"(neither a saved checkpoint nor the initial model); {last_good}" + (f"; {taken}" if taken else ""))
    start = f"resumed from the last good checkpoint (step {trial.recovered_step})"
    how = "bitwise" if trial.tolerance == 0 else f"within relative tolerance {trial.tolerance:g}"
    if trial.reproduced:
        cut = trial.horizon is not None and trial.compared_steps >= trial.horizon
        span = "following steps up to the horizon" if cut else "following steps"
        return f"{start} and reproduced {'the' if cut else 'all'} {trial.compared_steps} {span} {how}"
    diff = f", largest loss difference {trial.max_loss_diff:.3g}" if trial.max_loss_diff else ""
    if trial.max_loss_diff == 0:
        diff = " in its training state, with every loss the same"
    why = lead.message if lead is not None and lead.kind in DIVERGENCE_CAUSES else ""
    return (f"{start} but diverged from the uninterrupted run at step "
            f"{trial.first_divergent_step}{diff}" + (f": {why}" if why else ""))


def _resumed_from(trial: Trial) -> str:
    """Where the resume had started, in the words of the headline."""
    lg = trial.last_good_step
    if trial.outcome == "last-good":
        return f"it had resumed from the last good checkpoint (step {trial.recovered_step})"
    if trial.outcome == "scratch":
        return f"it had restarted from scratch, though the last good checkpoint was step {lg}"
    if trial.outcome == "older":
        return f"it had resumed from step {trial.recovered_step}, older than the last good checkpoint (step {lg})"
    return "it had started from a state no run recorded"


def text(trial: Trial) -> List[str]:
    """Headline, findings and where to look, as lines for the terminal."""
    lines = [trial.headline]
    for finding in trial.findings:
        tag = " (ignored)" if finding.ignored else " (note)" if finding.severity == "note" else ""
        lines.append(f"  - {finding.kind}{tag}: {finding.message}")
    if trial.sweep is not None:
        lines.extend(sweep.table([sweep.CrashPoint(**p) for p in trial.sweep]))
    if trial.results_dir:
        lines.append(f"  results and logs: {os.path.relpath(trial.results_dir)}")
    return lines
