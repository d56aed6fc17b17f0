"""``suite --flake N``: the uninterrupted run N more times before any fault, each compared with the reference.

A racy save (a saver thread that sometimes has not finished when the job exits, a rotation that sometimes deletes
the checkpoint being written) or an unseeded stream makes two uninterrupted runs of one command differ. Every
trial compares a resumed run with the reference, so such a job's verdicts say nothing: when a run differs, every
trial of the suite is inconclusive (``baseline-nondeterministic``) with what differed, and no trial runs. The
runs go as far as the reference went, into ``flake/run-<i>/`` of the suite's folder, and are never cached.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional

from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import RunRecord, Trial, document
from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial, trial_dir
from chaosckpt.conductor.runs import cache
from chaosckpt.conductor.runs.runlog import RunLog

FOLDER = "flake"
DONE = "flake.json"
"""In the suite's folder once the runs are in: ``{"runs": N, "difference": text or null}``."""


def check(folder: Path, plan: Plan, runs: int) -> Optional[str]:
    """Run the job ``runs`` more times without a fault; the first difference from the reference, or None. A
    resumed suite takes the answer it already has."""
    done = folder / DONE
    if done.is_file():
        return json.loads(done.read_text())["difference"]
    reference = _record(folder / "reference")
    ref_log = RunLog.read(folder / "reference" / reference.events)
    difference = None
    for i in range(1, runs + 1):
        dest = folder / FOLDER / f"run-{i}"
        shutil.rmtree(dest, ignore_errors=True)  # what an interrupted suite left of it
        record = cache.run_reference(plan.command, Path(plan.workdir), dest, plan.timeout,
                                     [Path(plan.results), *map(Path, plan.exclude)], reference.stop, plan.maps)
        said = differs(reference, ref_log, record, RunLog.read(dest / record.events), plan.tolerance)
        if said is not None:
            difference = f"uninterrupted run {i + 1} of {runs + 1} {said} (see {dest})"
            break
    atomic.write_text(done, json.dumps({"runs": runs, "difference": difference}) + "\n")
    return difference


def _record(run_dir: Path) -> RunRecord:
    return RunRecord(**json.loads((run_dir / cache.RUN_FILE).read_text()))


def differs(ref: RunRecord, ref_log: RunLog, run: RunRecord, log: RunLog, tolerance: float) -> Optional[str]:
    """How the uninterrupted run ``run`` differs from the reference ``ref``, in words, or None: how it ended,
    its steps (losses and parameters), and which of its saves completed at which step. A checkpoint's bytes may
    differ between two faithful runs (a timestamp inside it) and are not compared."""
    from chaosckpt.conductor.trial import compare

    if (run.returncode, bool(run.stopped)) != (ref.returncode, bool(ref.stopped)):
        how = "was stopped at its horizon" if run.stopped else f"exited with status {run.returncode}"
        first = "was stopped at its horizon" if ref.stopped else f"exited with status {ref.returncode}"
        return f"{how} where the first {first}"
    a, b = ref_log.trainer(), log.trainer()
    if a is None or b is None:
        return None if a is b else "took no step" if b is None else "took steps where the first took none"
    step = compare.baseline_divergence(b, a, tolerance)
    if step is not None:
        return f"left the first run's losses or parameters at step {step}"
    if len(a.steps) != len(b.steps):
        return f"took {len(b.steps)} steps where the first took {len(a.steps)}"
    return _saves_differ(ref_log, log)


def _saves_differ(ref_log: RunLog, log: RunLog) -> Optional[str]:
    """The first step at which the two runs' saves differ: one saved there and the other did not, or its save
    completed in one run only."""
    def saves(of: RunLog) -> Dict[int, bool]:
        saver = of.saver()
        return {s.step: bool(s.ok) and not s.unfinished for s in (saver.saves if saver else [])}

    first, this = saves(ref_log), saves(log)
    for step in sorted(set(first) | set(this)):
        if step not in this:
            return f"made no save at step {step}, where the first run saved"
        if step not in first:
            return f"saved at step {step}, where the first run did not"
        if first[step] != this[step]:
            return (f"left its save at step {step} {'complete' if this[step] else 'incomplete'}, where the first "
                    f"run's was {'complete' if first[step] else 'incomplete'}")
    return None


def inconclusive(folder: Path, trials: List[PlannedTrial], difference: str) -> None:
    """Every trial's verdict when the uninterrupted runs differ: inconclusive, saying how, never run."""
    from chaosckpt.conductor.trial.render import headline

    detail = (f"before any fault, {difference}: two runs of the same command do not agree, so no resume can be "
              "judged against them; seed every random stream, use deterministic algorithms, and wait for every "
              "save to finish before the job exits")
    for planned in trials:
        out = trial_dir(folder, planned)
        out.mkdir(parents=True, exist_ok=True)
        trial = Trial(scenario=planned.scenario, status="inconclusive", headline="", reason="baseline-nondeterministic",
                      detail=detail, params=dict(planned.params), results_dir=str(out))
        trial.headline = headline(trial)
        atomic.write_text(out / "result.json", json.dumps(document([trial]), indent=2) + "\n")
