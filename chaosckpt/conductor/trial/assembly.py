"""The trial's result assembled in one place from the values its steps returned, as far as it got: the
reference's findings, the faulted run's fault record, what a power loss left, what the ending measured, and
why it stopped; then the verdict on it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional

from chaosckpt.conductor.nodes.node_names import name_nodes
from chaosckpt.conductor.results.result import RunRecord, Trial
from chaosckpt.conductor.scenario import Scenario
from chaosckpt.conductor.trial import render, verdict
from chaosckpt.conductor.trial.aftermath import Aftermath
from chaosckpt.conductor.trial.faulted import Faulted
from chaosckpt.conductor.trial.measured import Measured
from chaosckpt.conductor.trial.options import Stop, TrialOptions
from chaosckpt.conductor.trial.reference import Reference


@dataclass
class Steps:
    """What the steps of a trial returned so far; the runner keeps each value as it comes, so that a trial
    stopped midway reports what its earlier steps found."""

    reference: Optional[Reference] = None
    faulted: Optional[Faulted] = None
    aftermath: Optional[Aftermath] = None
    measured: Optional[Measured] = None
    """What the trial's ending measured (all of it, or as far as it got)."""
    stop: Optional[Stop] = None


def assemble(scenario: Scenario, opts: TrialOptions, runs: List[RunRecord], steps: Steps) -> Trial:
    """The trial's result from its steps' values, before its verdict (``verdict.decided``)."""
    run = steps.faulted
    measured = steps.measured or (Measured(run.fault, run.last_good) if run is not None else Measured())
    findings = [*(steps.reference.findings if steps.reference else ()),
                *(steps.aftermath.findings if steps.aftermath else ()), *measured.findings]
    if measured.lead is not None:
        findings.insert(0, measured.lead)
    stop = steps.stop
    return Trial(
        scenario=scenario.name, status="inconclusive", headline="",
        reason=stop.reason if stop else None, detail=stop.detail if stop else None,
        params=scenario.params(), fault=measured.fault, last_good_step=measured.last_good_step,
        recovered_step=measured.recovered_step, outcome=measured.outcome, error=measured.error,
        error_path=measured.error_path, lost_steps=measured.lost_steps, reproduced=measured.reproduced,
        first_divergent_step=measured.first_divergent_step, max_loss_diff=measured.max_loss_diff,
        compared_steps=measured.compared_steps, horizon=opts.horizon, tolerance=opts.tolerance, findings=findings,
        ranks=list(measured.ranks), runs=list(runs), results_dir=str(opts.results_dir), sweep=measured.sweep,
    )


def result(scenario: Scenario, opts: TrialOptions, runs: List[RunRecord], steps: Steps, met: Optional[bool]) -> Trial:
    """The trial's result with its nodes named (a multi-node job), its verdict decided (``met``: whether what
    it measured met the scenario's expectation; None: it stopped before it could tell) and its headline."""
    trial = assemble(scenario, opts, runs, steps)
    if opts.cluster is not None:
        trial = name_nodes(trial, opts.cluster)
    streams_restored = steps.measured.streams_restored if steps.measured else None
    trial = verdict.decided(trial, met, opts.ignore, streams_restored)
    return dataclasses.replace(trial, headline=render.headline(trial))
