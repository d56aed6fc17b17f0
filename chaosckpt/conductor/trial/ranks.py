"""Multi-rank jobs: judging each rank's recovery, trajectory and data (``faults.rank_skew`` arms the rank-skew fault).

A distributed checkpoint is only as new as its oldest part, so the job's last
good step is the oldest of the saving ranks' newest completed saves. Each rank's
recovered step is found from its own first parameter digest, as for a single
process; ranks that came back from different steps are a finding of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from chaosckpt.conductor.results.result import Finding, RankRecord
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import compare, coverage
from chaosckpt.conductor.trial.measured import Measured


def last_good(faulted: RunLog) -> Optional[int]:
    """The newest step every saving rank had completed a save of when the job was killed."""
    newest = []
    for proc in faulted.ranks().values():
        if proc.saves:
            done = proc.completed_saves()
            newest.append(done[-1].step if done else None)
    if not newest or None in newest:
        return None
    return min(newest)


@dataclass
class RankVerdict:
    """Where one rank resumed from, whether it reproduced the reference, and where it stopped."""

    rank: int
    outcome: str
    recovered_step: Optional[int]
    reproduced: Optional[bool]
    first_divergent_step: Optional[int]
    compared_steps: int
    steps_taken: int
    last_step: Optional[int]
    last_save: Optional[Dict]
    error: Optional[str] = None

    def record(self) -> RankRecord:
        """This rank's entry in the result document."""
        return RankRecord(rank=self.rank, outcome=self.outcome, recovered_step=self.recovered_step,
                          reproduced=self.reproduced, first_divergent_step=self.first_divergent_step,
                          compared_steps=self.compared_steps, steps_taken=self.steps_taken, last_step=self.last_step,
                          last_save=self.last_save, error=self.error)


def _position(proc: Optional[ProcessLog], start: Optional[int]) -> Dict:
    """How far a resumed rank got: its steps, its last global step and its last save."""
    if proc is None:
        return {"steps_taken": 0, "last_step": None, "last_save": None}
    taken = len(proc.steps)
    save = proc.saves[-1] if proc.saves else None
    offset = start or 0
    return {
        "steps_taken": taken,
        "last_step": offset + taken if start is not None else None,
        "last_save": None if save is None else {"save": save.index, "step": offset + save.step, "ok": save.ok},
    }


def verdicts(reference: RunLog, faulted: RunLog, resume: RunLog, resume_rc: Optional[int], stderr_tail: str,
             good: Optional[int], tolerance: float) -> List[RankVerdict]:
    """One verdict per rank of the job."""
    table = compare.digest_table(*faulted.processes, *reference.processes)
    ref_ranks = reference.ranks()
    resumed = resume.ranks()
    world = max(reference.world_size(), resume.world_size())
    out = []
    for rank in range(world):
        own = RunLog([p for p in resume.processes if (p.rank or 0) == rank])
        rec = compare.recovery(own, resume_rc, stderr_tail, good, table)
        proc = resumed.get(rank)
        traj = None
        if rec.recovered_step is not None and proc is not None and rank in ref_ranks:
            traj = compare.trajectory(ref_ranks[rank], proc, rec.recovered_step, tolerance)
        out.append(RankVerdict(
            rank=rank,
            outcome=rec.outcome,
            recovered_step=rec.recovered_step,
            reproduced=None if traj is None else traj.reproduced,
            first_divergent_step=None if traj is None else traj.first_divergent_step,
            compared_steps=0 if traj is None else traj.compared,
            error=rec.error,
            **_position(proc, rec.recovered_step),
        ))
    return out


def where(ranks: List[Dict]) -> str:
    """Where each rank was (``Trial.ranks`` entries), in words: its last step and its last save."""
    parts = []
    for v in ranks:
        step = f"step {v['last_step']}" if v["last_step"] is not None else f"{v['steps_taken']} steps taken"
        save = v["last_save"]
        saved = "no save" if save is None else f"last save {save['save']} at step {save['step']}" + (
            "" if save["ok"] else ", unfinished")
        parts.append(f"rank {v['rank']} at {step} ({saved})")
    return "; ".join(parts)


def disagreement(ranks: List[RankVerdict]) -> Optional[Finding]:
    """``ranks-disagree`` when the ranks resumed from different steps."""
    steps = {v.rank: v.recovered_step for v in ranks}
    if len(set(steps.values())) < 2:
        return None
    said = ", ".join(f"rank {r} from {'step ' + str(s) if s is not None else 'no known checkpoint'}" for r, s in steps.items())
    return Finding(
        "ranks-disagree",
        f"the ranks resumed from different checkpoints: {said}; every rank must load the same step, the newest "
        "one all ranks completed",
        {"steps": {str(r): s for r, s in steps.items()}},
    )


def hung(ranks: List[Dict], timeout_s: float) -> Finding:
    """The resumed job did not finish in time; with disagreeing ranks, a mismatched collective is the likely cause."""
    return Finding(
        "resume-hung",
        f"the resumed job did not finish within {timeout_s:g} s and was killed: {where(ranks)}",
        {"ranks": {str(v["rank"]): {"last_step": v["last_step"], "last_save": v["last_save"]} for v in ranks}},
    )


def judge(measured: Measured, reference: RunLog, faulted: RunLog, resume: RunLog, resume_rc: Optional[int],
          stderr_tail: str, tolerance: float) -> Tuple[Measured, bool]:
    """``measured`` with the per-rank verdicts and the data coverage; False when the coverage fails the trial
    whatever rank 0 did (ranks that resumed from different steps fail it by their ``ranks-disagree`` finding)."""
    findings = coverage.epoch_never_set(reference)
    baseline = coverage.partition(reference, "uninterrupted run")
    findings += baseline
    ok = True
    recovered: Dict[int, Optional[int]] = {0: measured.recovered_step}
    if max(reference.world_size(), resume.world_size()) > 1:
        good = last_good(faulted)
        ranks = verdicts(reference, faulted, resume, resume_rc, stderr_tail, good, tolerance)
        measured = _of_the_job(measured, ranks, good, faulted)
        recovered = {v.rank: v.recovered_step for v in ranks}
        split = disagreement(ranks)
        if split is not None:
            findings.append(split)
    if not baseline:
        resumed = coverage.partition(resume, "resumed run")
        findings += resumed
        ok = ok and not resumed
    findings += coverage.order(reference, resume, recovered)
    return measured.found(*findings), ok


def _of_the_job(measured: Measured, ranks: List[RankVerdict], good: Optional[int], faulted: RunLog) -> Measured:
    """For a multi-rank job the headline fields (last good step, outcome, recovered step) become the job's
    and rank 0's, judged against the last step every rank had saved; any rank that diverged makes the job's
    trajectory diverge."""
    first = ranks[0]
    fault = measured.fault
    lost = measured.lost_steps
    if first.recovered_step is not None and fault is not None:
        lost = max(0, (fault.get("step") or 0) - first.recovered_step)
    measured = dataclasses.replace(
        measured, ranks=tuple(v.record() for v in ranks), last_good_step=good, outcome=first.outcome,
        recovered_step=first.recovered_step, lost_steps=lost, fault={**(fault or {}), "rank": faulted_rank(faulted)})
    diverged = [v for v in ranks if v.reproduced is False]
    if diverged:
        measured = dataclasses.replace(measured, reproduced=False, first_divergent_step=min(
            (v.first_divergent_step for v in diverged if v.first_divergent_step), default=None))
    return measured


def faulted_rank(faulted: RunLog) -> Optional[int]:
    """The rank the fault fired in."""
    for rank, proc in faulted.ranks().items():
        if proc.fault is not None:
            return rank
    return None
