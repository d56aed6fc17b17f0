"""The trial's pipeline: reference, arm, faulted run, then one of three endings (sweep, survivor, or
aftermath, resume and score), the headline last; the sandboxes go whatever happens."""

from __future__ import annotations

from typing import Optional

from chaosckpt.conductor.disk import moves
from chaosckpt.conductor.nodes.verdict import name_nodes
from chaosckpt.conductor.results.result import Trial
from chaosckpt.conductor.runs import preflight, sandbox
from chaosckpt.conductor.scenario import Scenario
from chaosckpt.conductor.trial import render, score, shared, verdict
from chaosckpt.conductor.trial.aftermath import node_power_loss, power_loss
from chaosckpt.conductor.trial.arm import arm
from chaosckpt.conductor.trial.context import Context
from chaosckpt.conductor.trial.crashpoints import sweep_save
from chaosckpt.conductor.trial.faulted import faulted
from chaosckpt.conductor.trial.options import Stop, TrialOptions
from chaosckpt.conductor.trial.plan import place
from chaosckpt.conductor.trial.reference import reference
from chaosckpt.conductor.trial.resume import resume
from chaosckpt.conductor.trial.scoring import score_trial
from chaosckpt.conductor.trial.survivor import judge_survivor


class TrialRunner:
    """Runs the steps of a trial; the verdict is decided once they end (``verdict``)."""

    def __init__(self, scenario: Scenario, options: TrialOptions) -> None:
        self.scenario = scenario
        self.opts = options
        self.trial = Trial(
            scenario=scenario.name,
            status="inconclusive",
            headline="",
            params=scenario.params(),
            tolerance=options.tolerance,
            horizon=options.horizon,
            results_dir=str(options.results_dir),
        )
        self.ctx = Context(scenario, options, self.trial)

    def run(self) -> Trial:
        met: Optional[bool] = None
        try:
            met = self._run()
        except Stop as stop:
            self.trial.reason = stop.reason
            self.trial.detail = stop.detail
        finally:
            if self.opts.cluster is not None:
                name_nodes(self.trial, self.opts.cluster)
            if not self.opts.keep_sandbox:
                sandbox.remove(self.ctx.sandbox_root)
        self.trial.findings = verdict.settle(self.trial.findings, self.opts.ignore, self.trial.reproduced)
        self.trial.status = verdict.status(met, self.trial.findings)
        lead = verdict.unsettled(self.trial.findings)
        if self.trial.status == "inconclusive" and self.trial.reason is None and lead is not None:
            self.trial.reason, self.trial.detail = verdict.UNSETTLING[lead.kind], lead.message
        self.trial.headline = render.headline(self.trial)
        return self.trial

    def _run(self) -> bool:
        """The steps; whether what they measured met the scenario's expectation."""
        ctx = self.ctx
        ref_log = reference(ctx)
        full = preflight.disk_fits(self.opts.results_dir, self.opts.workdir, self.opts.exclude, ref_log)
        if full:
            raise Stop("disk-full", full)
        ref = ref_log.trainer()
        self.trial.findings.extend(score.content_findings(ref))
        self.trial.findings.extend(score.loss_findings(ref))
        self.trial.findings.extend(moves.became_copy(ref, self.opts.workdir))
        place(ctx, ref_log)
        armed = arm(ctx, ref_log)
        run = shared.rebuild(ctx, armed, self.opts.prefix) if self.opts.prefix is not None else None
        run = run or faulted(ctx, armed, ref_log)
        if self.opts.sweep:
            return sweep_save(ctx, ref, armed, run)
        if armed.cut is not None and armed.cut.model is not None:
            node_power_loss(ctx, armed, run)
        elif ctx.scenario.kind.needs_aftermath:
            power_loss(ctx, armed, run.log)
        if run.carried_on:
            return judge_survivor(ctx, ref, run.log.trainer() or run.proc, armed)
        return score_trial(ctx, ref_log, armed, run, resume(ctx, armed, ref_log))


def run_trial(scenario: Scenario, options: TrialOptions) -> Trial:
    return TrialRunner(scenario, options).run()
