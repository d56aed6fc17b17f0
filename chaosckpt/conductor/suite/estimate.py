"""What a suite will cost before it runs (``suite --plan``) and what fits a budget (``--max-minutes``): the runs each
trial needs, each counted as long as the reference run, the one run of the job whose length chaosckpt knows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial
from chaosckpt.conductor.runs import cache

LEFT_OUT = "left out by --max-minutes"
"""The reason a trial cut to fit the budget is skipped, as the reports show it."""


def runs_of(trial: PlannedTrial, max_resumes: int) -> int:
    """The job runs a trial needs besides the reference: its faulted run and its resume, or, for a sweep, one resume
    per class of crash state (at most ``max_resumes``)."""
    return 0 if trial.skipped else 1 + (max_resumes if trial.sweep else 1)


def reference_seconds(plan: Plan, folder: Optional[Path] = None) -> Optional[float]:
    """How long the reference run took: the suite's own (``folder``) once it has run, else the project's cached one
    for this job and its files; None when neither exists yet."""
    if folder is not None and (folder / cache.RUN_FILE).is_file():
        return float(json.loads((folder / cache.RUN_FILE).read_text())["duration_s"])
    workdir = Path(plan.workdir)
    references = workdir / cache.FOLDER / "references"
    if not references.is_dir():
        return None  # no reference ever cached here (and --plan makes no .chaosckpt/ folder)
    exclude = [Path(plan.results), *map(Path, plan.exclude)]
    entry = cache.ReferenceCache(references).lookup(plan.reference_key, workdir, exclude, plan.command)
    return None if entry is None else float(json.loads((entry / cache.RUN_FILE).read_text())["duration_s"])


def minutes(runs: int, seconds: float, jobs: int) -> float:
    return runs * seconds / max(jobs, 1) / 60.0


def lines(plan: Plan, seconds: Optional[float], jobs: int) -> List[str]:
    """``suite --plan``: each trial with its runs and minutes, then the total, from the reference's length."""
    max_resumes = int(plan.options.get("max_resumes") or 8)
    each = (lambda n: f"~{minutes(n, seconds, 1):.1f} min") if seconds is not None else (lambda n: "")
    out = [f"chaosckpt suite plan: {len([t for t in plan.trials if not t.skipped])} trial(s) on "
           f"{' '.join(plan.command)}"]
    for trial in plan.trials:
        if trial.skipped:
            out.append(f"  {trial.id}: skipped: {trial.skipped}")
            continue
        n = runs_of(trial, max_resumes)
        out.append(f"  {trial.id}: {n} runs{' (at most: one per class of crash state)' if trial.sweep else ''} "
                   f"{each(n)}".rstrip())
    if plan.flake:
        out.append(f"  flake check (before the trials): {plan.flake} run{'s' if plan.flake > 1 else ''} "
                   f"{each(plan.flake)}".rstrip())
    total = sum(runs_of(t, max_resumes) for t in plan.trials) + plan.flake
    if seconds is None:
        out.append(f"total: {total} runs and the reference run, whose length is not known yet (no cached reference "
                   "for this job and its files): run the suite once, or chaosckpt run, to estimate")
    else:
        out.append(f"total: {total} runs of about {seconds:.0f} s each (the cached reference run's length), about "
                   f"{minutes(total, seconds, jobs):.1f} minutes with {jobs} trial(s) at a time")
    return out


def fit(plan: Plan, seconds: float, jobs: int, budget_min: float) -> List[PlannedTrial]:
    """Mark skipped (``LEFT_OUT``) the trials past the first ones, in order, whose runs fit ``budget_min`` minutes
    after the reference run and the flake check's runs; the trials left out."""
    max_resumes = int(plan.options.get("max_resumes") or 8)
    used = plan.flake
    cut = []
    for trial in plan.trials:
        if trial.skipped:
            continue
        n = runs_of(trial, max_resumes)
        if minutes(used + n, seconds, jobs) > budget_min:
            trial.skipped = LEFT_OUT
            cut.append(trial)
        else:
            used += n
    return cut
