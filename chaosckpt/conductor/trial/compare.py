"""Scoring a trial from its runs' events: which checkpoint was recovered, and was the trajectory reproduced."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from chaosckpt import checkpoint_content
from chaosckpt.conductor.results.result import Finding, Outcome
from chaosckpt.conductor.runs import logcap
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import alignment, restored_state, rng_capture


@dataclass
class Recovery:
    outcome: Outcome
    recovered_step: Optional[int] = None
    error: Optional[str] = None
    error_path: Optional[str] = None


@dataclass
class Trajectory:
    """How the resumed steps compare with the reference's steps at the same global step."""

    reproduced: bool
    compared: int
    first_divergent_step: Optional[int] = None
    max_loss_diff: Optional[float] = None
    findings: List[Finding] = field(default_factory=list)
    streams_restored: Optional[bool] = None
    """Whether every random stream the loop draws from was, at the first resumed step, as the uninterrupted run's
    at that step (None: no step to compare)."""


def _close(a: float, b: float, tolerance: float) -> bool:
    if tolerance == 0.0:
        return a == b or (math.isnan(a) and math.isnan(b))
    return abs(a - b) <= tolerance * max(abs(a), abs(b))


def _loss_diff(a: List[float], b: List[float]) -> float:
    if len(a) != len(b):
        return math.inf
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def steps_match(a: dict, b: dict, tolerance: float) -> bool:
    """Same loss values and parameter fingerprint: bitwise, or within a relative tolerance."""
    la, lb = a.get("loss", []), b.get("loss", [])
    if len(la) != len(lb) or not all(_close(x, y, tolerance) for x, y in zip(la, lb)):
        return False
    if tolerance == 0.0:
        return a.get("pfp") == b.get("pfp")
    return _close(a.get("psum", 0.0), b.get("psum", 0.0), tolerance)


def first_mismatch(run: List[dict], reference: List[dict], offset: int, tolerance: float) -> Optional[int]:
    """Global step of the first of ``run``'s steps (starting at global step offset+1) unlike the reference's."""
    for i, step in enumerate(run):
        global_step = offset + i + 1
        if global_step > len(reference):
            return None
        if not steps_match(step, reference[global_step - 1], tolerance):
            return global_step
    return None


class DigestTable(Dict[str, int]):
    """Exact parameter digest -> the first global step at which that state existed (saves and the initial
    state), with every step of a digest that recurs and the longest run's steps, to tell those apart."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: Dict[str, List[int]] = {}
        self.longest: Optional[ProcessLog] = None

    def add(self, digest: str, step: int) -> None:
        self.setdefault(digest, step)
        if step not in self.steps.setdefault(digest, []):
            self.steps[digest].append(step)

    def step_of(self, resumed: ProcessLog) -> Optional[int]:
        """The global step the resumed process started from; when its digest recurs (NaN, frozen or all-zero
        parameters), the candidate its own step events agree with: the number of steps it took to finish, then
        its random streams at its first step. None when that does not single one out."""
        digest = resumed.first_digest()
        candidates = self.steps.get(digest, []) if digest is not None else []
        if len(candidates) <= 1 or self.longest is None:
            return candidates[0] if candidates else None
        ref = self.longest.steps
        by_count = [c for c in candidates if len(ref) - c == len(resumed.steps)]
        if len(by_count) == 1:
            return by_count[0]
        first_rng = resumed.steps[0].get("rng")
        by_rng = [c for c in by_count or candidates if c < len(ref) and ref[c].get("rng") == first_rng]
        return by_rng[0] if len(by_rng) == 1 else None


def digest_table(*logs: Optional[ProcessLog]) -> DigestTable:
    """The ``DigestTable`` of these processes' saves and initial states."""
    table = DigestTable()
    for log in logs:
        if log is None:
            continue
        if table.longest is None or len(log.steps) > len(table.longest.steps):
            table.longest = log
        first = log.first_digest()
        if first is not None:
            table.add(first, 0)
        for save in log.saves:
            table.add(save.digest, save.step)
    return table


def recovery(resume: RunLog, resume_rc: Optional[int], stderr_tail: str, last_good: Optional[int],
             table: DigestTable) -> Recovery:
    """Where the resumed job started, from its first parameter digest."""
    trainer = resume.trainer()
    if trainer is None:
        failed = resume.failed_loads()
        if failed:
            return Recovery("crashed", error=failed[-1]["error"], error_path=failed[-1].get("path"))
        return Recovery("crashed", error=stderr_tail or f"exit status {resume_rc}")
    step = table.step_of(trainer)
    return Recovery("unknown-state") if step is None else placed(step, last_good)


def placed(step: int, last_good: Optional[int]) -> Recovery:
    """A resume that started from the checkpoint of ``step``, against the last good one."""
    if step == 0 and (last_good or 0) > 0:
        return Recovery("scratch", 0)
    if last_good is None or step >= last_good:
        return Recovery("last-good", step)
    return Recovery("older", step)


def loss_findings(reference: Optional[ProcessLog]) -> List[Finding]:
    """A loss that is NaN or infinite in the uninterrupted run, named: the job trains on nothing a resume could
    be judged by, and its parameter digests repeat."""
    for index, step in enumerate(reference.steps if reference is not None else []):
        bad = [x for x in step.get("loss", []) if not math.isfinite(x)]
        if bad:
            return [Finding(
                "non-finite-loss",
                f"the uninterrupted run's loss was {bad[0]} from step {index + 1}: the job is not training, so "
                "its checkpoints all hold the same state; fix the loss (learning rate, data, initialisation) first",
                {"step": index + 1, "loss": str(bad[0])},
            )]
    return []


def trajectory(reference: ProcessLog, resume: ProcessLog, start: int, tolerance: float) -> Trajectory:
    """Compare the resumed steps with the reference from global step ``start`` + 1 on."""
    ref_steps = reference.steps
    compared = 0
    max_diff = 0.0
    for i, step in enumerate(resume.steps):
        g = start + i + 1
        if g > len(ref_steps):
            break
        compared += 1
        max_diff = max(max_diff, _loss_diff(step.get("loss", []), ref_steps[g - 1].get("loss", [])))
    divergent = first_mismatch(resume.steps, ref_steps, start, tolerance)
    findings: List[Finding] = []
    modes = eval_findings(reference, resume, start)
    expected = len(ref_steps) - start
    taken = len(resume.steps)
    # a run its horizon stopped has no steps past it, which is no difference
    short = taken < expected and resume.stopped is None
    long = taken > expected and reference.stopped is None
    counted = Finding(
        "step-count-differs",
        f"the resumed run took {len(resume.steps)} steps after step {start}; the uninterrupted run took {expected}",
        {"resumed_steps": len(resume.steps), "reference_steps": expected},
    ) if short or long else None
    if divergent is None and counted is not None:
        divergent = start + min(len(resume.steps), expected) + 1
    # a part of the training state the resume did not restore is a divergence at its first step, losses or not
    unrestored = restored_state.findings(reference, resume, start, modes_differ=bool(modes))
    if divergent is None and unrestored and compared:
        divergent = start + 1
    # steps skipped or replayed lead: the resume then trained on other batches, whatever mode its modules were in
    shifted = alignment.finding(reference, resume, start) if divergent is not None else None
    findings.extend([*([] if shifted is None else [shifted]), *unrestored, *modes])
    comparable = bool(resume.steps) and start < len(ref_steps)
    restored = not rng_findings(reference, resume, start, modes_differ=bool(modes)) if comparable else None
    if divergent is not None:
        # random streams compared where the uninterrupted run trained the batch the resume's first step trained on;
        # after steps skipped or replayed, a stream is named only when it is not as it was at the checkpoint's step
        # either (restored there, its draws differ because the batches do: the shift alone explains them)
        at = start if shifted is None else shifted.details["batch_of_step"] - 1
        unrestored_streams = [] if restored else rng_findings(reference, resume, at, modes_differ=bool(modes))
        if shifted is not None and unrestored_streams:
            differ = {f.details["stream"] for f in rng_findings(reference, resume, start, modes_differ=bool(modes))}
            unrestored_streams = [f for f in unrestored_streams if f.details["stream"] in differ]
        findings.extend(unrestored_streams)
    # a count that differs is named beside whatever else diverged (no cause hides another), unless the steps
    # skipped or replayed already say so, or the resume ended on an error
    if counted is not None and shifted is None and resume.uncaught is None:
        findings.append(counted)
    return Trajectory(
        reproduced=divergent is None,
        compared=compared,
        first_divergent_step=divergent,
        max_loss_diff=max_diff if compared else None,
        findings=findings,
        streams_restored=restored,
    )


def rng_findings(reference: ProcessLog, resume: ProcessLog, start: int, modes_differ: bool = False) -> List[Finding]:
    """Random streams whose state at the first resumed step differs from the reference's at that step: not
    restored, or restored as captured at the save but with draws between the save and the next step in one run
    and not the other (``rng_capture``).

    Streams the loop never draws from are left out. When modules trained in the wrong mode
    (``modes_differ``), dropout's draws changed the device streams (torch, CUDA) before the step: those
    are compared as they were when the step's first batch was fetched, before its forward, or left out
    when no DataLoader said when that was."""
    if not resume.steps or start >= len(reference.steps):
        return []
    ours = dict(resume.steps[0].get("rng", {}))
    theirs = dict(reference.steps[start].get("rng", {}))
    if modes_differ:
        for run in (ours, theirs):
            for name in [n for n in run if n == "torch" or n.startswith("cuda:")]:
                del run[name]
        ours.update(resume.steps[0].get("rng_fetch", {}))
        theirs.update(reference.steps[start].get("rng_fetch", {}))
    drawn = {
        name for name in theirs
        if len({s.get("rng", {}).get(name) for s in reference.steps}) > 1
    }
    aliases = reference.steps[0].get("aliases", {}) if reference.steps else {}
    timing = rng_capture.timing(reference, resume, start)
    out: List[Finding] = []
    for name in sorted(drawn):
        if ours.get(name) == theirs.get(name):
            continue
        evidence = {"stream": name, "step": start + 1}
        if aliases.get(name):
            evidence["aliases"] = aliases[name]
        shown = STREAM_NAMES.get(name, name)
        if name in timing:
            out.extend(Finding(kind, rng_capture.message(kind, shown, start), {**evidence, "captured_at_step": start})
                       for kind in timing[name])
            continue
        out.append(
            Finding(
                "rng-not-restored",
                f"the {shown} random stream was not restored: at step {start + 1} its "
                f"state differs from the uninterrupted run's; save and restore it in the checkpoint",
                evidence,
            )
        )
    return out


def eval_findings(reference: ProcessLog, resume: ProcessLog, start: int) -> List[Finding]:
    """Modules the resumed run trained in eval mode where the uninterrupted run had them in train mode."""
    modules: Dict[str, List[int]] = {}
    for i, step in enumerate(resume.steps):
        g = start + i + 1
        if g > len(reference.steps):
            break
        for name in set(step.get("eval", [])) - set(reference.steps[g - 1].get("eval", [])):
            modules.setdefault(name, []).append(g)
    if not modules:
        return []
    steps = sorted({g for gs in modules.values() for g in gs})
    names = sorted(modules)
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return [
        Finding(
            "eval-mode-in-training",
            f"after the resume, {shown} trained in eval mode at steps {steps[0]}-{steps[-1]}, where the "
            "uninterrupted run had them in train mode: call model.train() after loading and after any validation pass",
            {"modules": names, "first_step": steps[0], "last_step": steps[-1]},
        )
    ]


def content_findings(reference: Optional[ProcessLog]) -> List[Finding]:
    """Advice about what the job's checkpoints hold, from the agent's look at each saved object, once per kind and
    message; ``rng-states-missing`` once in all (``_rng_states_missing``)."""
    seen: Dict[Tuple[str, str], Finding] = {}
    for save in reference.saves if reference is not None else []:
        for item in save.content:
            key = (item["kind"], "" if item["kind"] == "rng-states-missing" else item["message"])
            if key not in seen:
                details = {k: v for k, v in item.items() if k not in ("kind", "message")}
                seen[key] = Finding(item["kind"], item["message"], {**details, "saves": []})
            elif item["kind"] == "rng-states-missing":
                seen[key] = _rng_states_missing(seen[key], item)
            seen[key].details["saves"].append(save.index)
    return list(seen.values())


def _rng_states_missing(found: Finding, item: dict) -> Finding:
    """One ``rng-states-missing`` for every save: the agent judges each save against the streams it has seen drawn
    so far (by name), so a stream first drawn after a save (torch's, drawn by a shuffled DataLoader's next
    iterator) is missing from that save's count. Named with every stream and the states of the save carrying
    fewest."""
    streams = sorted({*found.details["streams"], *item["streams"]})
    rng = min(found.details["rng_states"], item["rng_states"], key=len)
    merged = checkpoint_content.rng_states_missing(rng, streams) or item
    details = {k: v for k, v in merged.items() if k not in ("kind", "message")}
    return Finding("rng-states-missing", merged["message"], {**details, "saves": found.details["saves"]})


STREAM_NAMES = {
    "torch": "torch CPU (torch.get_rng_state)",
    "python": "Python `random` (random.getstate)",
    "numpy": "numpy global (np.random.get_state)",
}


def baseline_divergence(faulted: ProcessLog, reference: ProcessLog, tolerance: float) -> Optional[int]:
    """First step at which the faulted run, before its fault, already differs from the reference."""
    return first_mismatch(faulted.steps, reference.steps, 0, tolerance)


def tail_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a log, for an error excerpt."""
    return logcap.last_line(path, limit)


def crash_line(log: RunLog, stderr: Path) -> str:
    """Why a run crashed, in the failing process's own words: the first exception a process ended on (a
    rank's, not torchrun's banner after it), else the log's last line."""
    ended = sorted((p.uncaught for p in log.processes if p.uncaught is not None), key=lambda e: e["ts"])
    return ended[0]["error"] if ended else tail_line(stderr)


def fault_point(faulted: RunLog) -> Tuple[Optional[ProcessLog], Optional[int]]:
    """The process the fault fired in, and the global step it had reached at that moment."""
    for proc in faulted.processes:
        if proc.fault is not None:
            steps = [s.step for s in proc.saves if s.index == proc.fault["save"]]
            return proc, (steps[0] if steps else len(proc.steps))
    return None, None
