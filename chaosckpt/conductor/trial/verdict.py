"""The verdict decided in one place: the findings as reported (ignored kinds marked, consequences the trial
disproved reworded), the trial's status, and the finding its headline names as the cause."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from chaosckpt.conductor.results.result import Finding, Reason, Status, Trial
from chaosckpt.protocol import FindingKind

UNRESTORED: Tuple[FindingKind, ...] = ("optimizer-not-restored", "scheduler-not-restored", "buffers-not-restored",
                                       "scaler-not-restored")
"""Finding kinds of the restored-state diff, each naming the ``part`` the resume did not restore."""

DIVERGENCE_CAUSES: Tuple[FindingKind, ...] = (
    "resumed-other-weights", "steps-skipped", "steps-replayed", *UNRESTORED, "eval-mode-in-training",
    "rng-not-restored", "rng-captured-early", "rng-drawn-after-restore", "step-count-differs", "epoch-order-replayed",
    "epoch-order-differs", "sampler-overlap", "sampler-missing")
"""Finding kinds that explain a divergence, in the order the headline prefers them."""

UNSETTLING: Dict[FindingKind, Reason] = {"sweep-untried": "sweep-untried", "journal-refused": "journal-refused"}
"""Finding kinds that leave a trial that would pass inconclusive, with the reason it gives: what the trial did not
try could still fail it, or the journal it replayed was not the agent's, so no cap or shortcut may turn it into a
pass."""

LEADS: Tuple[FindingKind, ...] = ("background-error-unobserved", "exit-with-save-in-flight", "emergency-save-torn",
                                  "exit-0-after-preemption", "resume-exited",
                                  "acknowledged-checkpoint-lost", "ranks-disagree")
"""Finding kinds that lead a failed trial's headline, before where the job resumed from."""


def _streams(finding: Finding) -> str:
    streams = finding.details.get("streams")
    count = streams if isinstance(streams, int) else len(streams or [])
    listed = f" ({', '.join(streams)})" if isinstance(streams, list) and streams else ""
    return f"{count} random stream{'' if count == 1 else 's'}{listed}"


def _rng_states_missing(finding: Finding, shown: str = "the resumed run reproduced the uninterrupted one") -> str:
    saved = len(finding.details.get("rng_states") or [])
    return (f"this checkpoint carries {saved or 'no'} RNG state{'' if saved == 1 else 's'} for the "
            f"{_streams(finding)} the loop draws from, yet {shown}: the job "
            "sets those streams again itself (as a loader reseeded every epoch does); save every stream's state if "
            "it ever stops doing so")


def _streams_as_before(finding: Finding) -> str:
    return _rng_states_missing(finding, "at the resume each stream was as in the uninterrupted run")


def _no_loader_state(finding: Finding) -> str:
    return ("the checkpoint holds no sampler or loader state, yet the resumed run reproduced the uninterrupted one: "
            "the job puts its data order back itself; save the loader's state if it ever stops doing so")


def _lacks_state(finding: Finding) -> str:
    parts = finding.details.get("parts") or []
    listed = ", ".join(str(p) for p in parts) or "part of the training state"
    return (f"the checkpoint does not hold {listed}, yet the resumed run reproduced the uninterrupted one: the job "
            "makes it anew the same way (or it never changes); save its state_dict() if that ever stops being so")


DISPROVED: Dict[FindingKind, Callable[[Finding], str]] = {
    "rng-states-missing": _rng_states_missing,
    "no-loader-state": _no_loader_state,
    "checkpoint-lacks-state": _lacks_state,
}
"""Kinds whose wording predicts a divergence, with their wording once the resume reproduced the trajectory."""


def settle(findings: Sequence[Finding], ignore: Sequence[str], reproduced: Optional[bool],
           streams_restored: Optional[bool] = None) -> List[Finding]:
    """The findings as the result reports them: the kinds the user silenced marked ignored; with a reproduced
    trajectory, those predicting a divergence reworded as notes, so nothing claims what the trial disproved (RNG
    states missing, too, when every stream was as the uninterrupted run's at the resume, ``streams_restored``,
    whatever else diverged); a part of the state the checkpoint lacks an error where the resume was shown not to
    restore it."""
    out = []
    unrestored = {f.details.get("part") for f in findings if f.kind in UNRESTORED}
    for finding in findings:
        if finding.kind == "checkpoint-lacks-state" and unrestored & set(finding.details.get("parts") or ()):
            finding = dataclasses.replace(finding, severity="error")  # the trial showed what it cost
        if reproduced and finding.kind in DISPROVED:
            finding = dataclasses.replace(finding, message=DISPROVED[finding.kind](finding), severity="note")
        elif streams_restored and finding.kind == "rng-states-missing":
            finding = dataclasses.replace(finding, message=_streams_as_before(finding), severity="note")
        if finding.kind in ignore:
            finding = dataclasses.replace(finding, ignored=True)
        out.append(finding)
    return out


def status(met: Optional[bool], findings: Sequence[Finding]) -> Status:
    """``met``: whether what the trial measured met the scenario's expectation (None: the trial stopped before
    it could tell). Failed when it did not or a finding counted (not ignored) is an error; else inconclusive
    when a counted finding says part of it was never tried (``UNSETTLING``); else passed."""
    if met is None:
        return "inconclusive"
    if not met or any(f.severity == "error" and not f.ignored for f in findings):
        return "failed"
    return "inconclusive" if unsettled(findings) is not None else "passed"


def unsettled(findings: Sequence[Finding]) -> Optional[Finding]:
    """The first counted finding that keeps a trial from passing without failing it (``UNSETTLING``)."""
    return next((f for f in findings if f.kind in UNSETTLING and not f.ignored), None)


def decided(trial: Trial, met: Optional[bool], ignore: Sequence[str], streams_restored: Optional[bool] = None) -> Trial:
    """``trial`` with its verdict: its findings as reported (``settle``), its status (``status``) and, when a
    finding left it inconclusive with no other reason given, that finding's reason (``UNSETTLING``)."""
    findings = settle(trial.findings, ignore, trial.reproduced, streams_restored)
    decided_status = status(met, findings)
    lead = unsettled(findings)
    if decided_status == "inconclusive" and trial.reason is None and lead is not None:
        return dataclasses.replace(trial, findings=findings, status=decided_status, reason=UNSETTLING[lead.kind],
                                   detail=lead.message)
    return dataclasses.replace(trial, findings=findings, status=decided_status)


def cause(trial: Trial) -> Optional[Finding]:
    """The finding the headline names: for a failed trial, what failed it ahead of where it resumed from (the
    resume's exit, a lost copy of a checkpoint the resume still loaded, ranks that disagree); else the first
    that explains a divergence. Ignored findings are never named."""
    counted = [f for f in trial.findings if not f.ignored]
    if not trial.passed:
        for kind in LEADS:
            lead = next((f for f in counted if f.kind == kind and _leads(f, trial)), None)
            if lead is not None:
                return lead
    return next((f for f in counted if f.kind in DIVERGENCE_CAUSES), None)


def _leads(finding: Finding, trial: Trial) -> bool:
    """A lost checkpoint leads only when it was a copy or a hard link and the checkpoint itself survived for the
    resume."""
    if finding.kind != "acknowledged-checkpoint-lost":
        return True
    return ("copy_of" in finding.details or "link_of" in finding.details) and trial.outcome == "last-good"
