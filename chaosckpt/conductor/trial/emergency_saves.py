"""What a job did with a preemption: the record of the signal and the saves after it, and the findings about its
emergency checkpoint (torn, longer than the grace, never made), a signal that never reached the ranks, and an exit
status that tells the scheduler the job is done when its last steps were never saved."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from chaosckpt.conductor.disk import checkpoints
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save

MORE_TIME = ("or ask the scheduler for more time: Slurm's --signal=TERM@120 (or KillWait), Kubernetes' "
             "terminationGracePeriodSeconds")
"""Where a grace period comes from, for the fixes that need a longer one."""


def _steps(n: int) -> str:
    return f"{n} step{'' if n == 1 else 's'}"


def _span(first: int, last: int) -> str:
    return f"step {first} is" if first == last else f"steps {first}-{last} are"


def _last_step(proc: ProcessLog) -> Optional[int]:
    return proc.steps[-1].get("step") if proc.steps else None


def _after(proc: ProcessLog, sent: Dict) -> List[Save]:
    """The saves ``proc`` began after the signal: its emergency checkpoints."""
    return [s for s in proc.saves if s.ts >= sent["ts"]]


def _who(rank: int, log: RunLog) -> str:
    return f"rank {rank}" if log.world_size() > 1 else "the job"


def role(pid: int, sent: Dict) -> str:
    """What process ``pid`` (as the job knows it) is to the job: ``rank N``, or ``launcher`` when it is no rank."""
    ranks = [f"rank {r}" for r, p in sent["ranks"].items() if p == pid]
    return ranks[0] if ranks else "launcher" if pid == sent["launcher"] else f"process {pid}"


def record(sent: Dict, log: RunLog, step: Optional[int], returncode: Optional[int]) -> Dict:
    """The fault record's ``preemption``: the signal, to whom, the grace, what each rank saved after it and how
    long that took (``took_s``: null for a save that never ended), whether the job ended within the grace and its
    exit status (a negative one: the signal that ended it)."""
    saves = []
    for rank, proc in log.ranks().items():
        for save in _after(proc, sent):
            took = round(save.ended_ts - save.ts, 3) if save.ended_ts is not None else None
            saves.append({"rank": rank, "save": save.index, "step": save.step,
                          "began_after_s": round(save.ts - sent["ts"], 3), "took_s": took, "finished": bool(save.ok)})
    return {
        "signal": sent["signal"],
        "target": sent["target"],
        "grace_s": sent["grace_s"],
        "step": step,
        "sent_to": [role(pid, sent) for pid in sent["sent_to"]],
        "handling": {role(int(pid), sent): how for pid, how in sent["handling"].items()},
        "saves_after": saves,
        "ended_in_grace": sent["ended_in_grace"],
        "ended_after_s": sent["ended_after_s"],
        "exit": returncode,
    }


def findings(sent: Optional[Dict], log: RunLog, returncode: Optional[int], sizes: Dict[str, Optional[int]]) -> List[Finding]:
    """The findings about how the job met the preemption ``sent`` (``runs.signalling.deliver``'s record); ``sizes``:
    the checkpoint files' sizes once the run ended (the fault record's ``files``)."""
    if sent is None:
        return []
    out: List[Finding] = []
    ranks = log.ranks()
    for rank, proc in ranks.items():
        out += _cut_saves(sent, rank, proc, log, sizes)
    missed = _missed(sent, ranks)
    if missed:
        out.append(missed)
    unsaved = _unsaved(sent, ranks, missed is not None)
    if unsaved is not None:
        out.append(unsaved)
    success = _exit_success(sent, ranks, returncode)
    if success is not None:
        out.append(success)
    return out


def _cut_saves(sent: Dict, rank: int, proc: ProcessLog, log: RunLog, sizes: Dict[str, Optional[int]]) -> List[Finding]:
    """Emergency saves the SIGKILL cut: over the last checkpoint (torn, that checkpoint lost) or beside it."""
    out = []
    grace, signal = sent["grace_s"], sent["signal"]
    for save in _after(proc, sent):
        if save.ok or sent["ended_in_grace"]:
            continue
        began = save.ts - sent["ts"]
        ran = max(grace - began, 0.0)
        details = {"rank": rank, "save": save.index, "step": save.step, "grace_s": grace,
                   "began_after_s": round(began, 3), "ran_s": round(ran, 3)}
        when = "right after" if began < 0.05 else f"{began:.1f} s after"
        timing = (f"{_who(rank, log)} began its emergency save of step {save.step} {when} the {signal} and had "
                  f"written it for {ran:.1f} s when the SIGKILL came at the end of the {grace:g} s grace")
        torn = _torn(proc, save, sizes)
        if torn is not None:
            path, step = torn
            out.append(Finding(
                "emergency-save-torn",
                f"{timing}; it was written straight over {path}, which held the checkpoint of step {step}, so that "
                "checkpoint is torn with it. Write the emergency checkpoint to a temporary name, fsync it and "
                "os.replace() it over the old one",
                {**details, "path": path, "overwritten_step": step}))
        else:
            out.append(Finding(
                "emergency-save-too-long",
                f"{timing}, so it never landed (the checkpoint before it is what a resume gets). Make the save "
                f"shorter than the grace, write it asynchronously and exit once it lands, {MORE_TIME}",
                details))
    return out


def _torn(proc: ProcessLog, cut: Save, sizes: Dict[str, Optional[int]]) -> Optional[Tuple[str, int]]:
    """The file of the newest checkpoint completed before the ``cut`` save that no longer holds the bytes that
    checkpoint gave it (the cut save wrote over it), and that checkpoint's step."""
    for save in reversed([s for s in proc.completed_saves() if s.ts < cut.ts]):
        for file in save.files:
            path = proc.shown(save.landing(file["path"])) if file.get("path") else None
            if path in sizes and sizes[path] != file.get("bytes"):
                return path, save.step
        return None
    return None


def _missed(sent: Dict, ranks: Dict[int, ProcessLog]) -> Optional[Finding]:
    """Ranks the signal never reached: not sent it (it went to the launcher only), alive until the SIGKILL,
    training on and saving nothing after it."""
    sent_to = set(sent["sent_to"])
    missed = [r for r, p in ranks.items() if p.pid not in sent_to and not p.ended and not _after(p, sent)]
    if not missed:
        return None
    listed = ", ".join(str(r) for r in missed)
    return Finding(
        "signal-missed-ranks",
        f"the {sent['signal']} went to the job's launcher only and never reached rank{'s' if len(missed) > 1 else ''} "
        f"{listed}: {'they' if len(missed) > 1 else 'it'} trained on and saved nothing until killed with the rest "
        "of the job. Have the launcher pass the signal on: exec the trainer from a "
        "shell script (or trap the signal and forward it), or start the ranks with torchrun, which forwards it",
        {"ranks": missed, "signal": sent["signal"], "grace_s": sent["grace_s"]})


def _unsaved(sent: Dict, ranks: Dict[int, ProcessLog], missed: bool) -> Optional[Finding]:
    """No rank saved after the signal, and steps were taken since the last checkpoint: they are lost. ``missed``:
    the signal never reached some rank."""
    if any(_after(p, sent) for p in ranks.values()):
        return None
    proc = ranks.get(0) or next(iter(ranks.values()), None)
    if proc is None:
        return None
    reached = _last_step(proc)
    saved = checkpoints.saved(proc)
    last = saved[-1].step if saved else 0
    if reached is None or reached <= last:
        return None
    handling = {sent["handling"].get(str(p.pid), "gone") for p in ranks.values()}
    how = ("the signal never reached its trainer" if missed
           else "it has no handler for it, so the signal's default action ended it at once" if handling == {"default"}
           else "it exited without saving" if sent["ended_in_grace"]
           else "it went on without saving until the SIGKILL at the end of the grace")
    since = f"its last checkpoint (step {last})" if saved else "its start (it had saved no checkpoint)"
    return Finding(
        "no-emergency-save",
        f"the job saved nothing after the {sent['signal']} at step {reached}: {how}; the {_steps(reached - last)} "
        f"since {since} are lost to every preemption like this one. Handle {sent['signal']}: set a flag in the "
        "handler, save a checkpoint at the next step, and exit",
        {"step": reached, "last_saved_step": last if saved else None, "steps_lost": reached - last,
         "signal": sent["signal"], "handling": sorted(handling)})


def _exit_success(sent: Dict, ranks: Dict[int, ProcessLog], returncode: Optional[int]) -> Optional[Finding]:
    """The job exited 0 within the grace without a checkpoint of the step it stopped at: a scheduler takes it for
    a finished job and never requeues it."""
    if returncode != 0 or not sent["ended_in_grace"]:
        return None
    proc = ranks.get(0) or next(iter(ranks.values()), None)
    reached = _last_step(proc) if proc is not None else None
    saved = proc.completed_saves() if proc is not None else []
    last = saved[-1].step if saved else 0
    if reached is None or reached <= last:
        return None
    return Finding(
        "exit-0-after-preemption",
        f"the job exited with status 0 after the {sent['signal']}, at step {reached}, without a checkpoint of it "
        f"(its newest is {'step ' + str(last) if saved else 'none'}): a scheduler takes status 0 for a finished job "
        f"and never requeues it, so {_span(last + 1, reached)} lost for good. Save before exiting, or exit with a "
        "non-zero status so that the job is requeued",
        {"step": reached, "last_saved_step": last if saved else None, "signal": sent["signal"]})
