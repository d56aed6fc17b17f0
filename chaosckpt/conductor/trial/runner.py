"""The trial's pipeline: reference, arm, faulted run, then one of three endings (sweep, survivor, or
aftermath, resume and score); each step returns its value, and the result is assembled from them once they
end (``assembly``); the sandboxes go whatever happens."""

from __future__ import annotations

from typing import Optional

from chaosckpt.conductor.results.result import Trial
from chaosckpt.conductor.runs import preflight, sandbox, signals
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.scenario import Scenario
from chaosckpt.conductor.trial import assembly, async_saves, compare, emergency_saves, shared
from chaosckpt.conductor.trial.aftermath import aftermath
from chaosckpt.conductor.trial.arm import Armed, arm
from chaosckpt.conductor.trial.context import Context
from chaosckpt.conductor.trial.crashpoints import sweep_save
from chaosckpt.conductor.trial.faulted import Faulted, faulted
from chaosckpt.conductor.trial.options import Interrupted, Stop, TrialOptions
from chaosckpt.conductor.trial.plan import place
from chaosckpt.conductor.trial.reference import judged, reference, usable
from chaosckpt.conductor.trial.resume import resume
from chaosckpt.conductor.trial.scoring import met, score_trial
from chaosckpt.conductor.trial.survivor import later_resume, survived, survivor_met


class TrialRunner:
    """Runs the steps of a trial, keeping the value each returns (``steps``); the result is assembled and its
    verdict decided once they end."""

    def __init__(self, scenario: Scenario, options: TrialOptions) -> None:
        self.scenario = scenario
        self.opts = options
        self.ctx = Context(scenario, options)
        self.steps = assembly.Steps()

    def run(self) -> Trial:
        met: Optional[bool] = None
        try:
            met = self._run()
        except Stop as stop:
            self.steps.stop = stop
        except KeyboardInterrupt as exc:
            steps = self.steps
            phase = ("the uninterrupted run" if steps.reference is None else "the faulted run" if steps.faulted is None
                     else "the resume")
            said = signals.describe(exc)
            self.steps.stop = Stop("interrupted", f"{said[0].lower()}{said[1:]} during {phase}; run the trial again")
            raise Interrupted(exc, assembly.result(self.scenario, self.opts, self.ctx.runs, self.steps, None)) from None
        finally:
            if not self.opts.keep_sandbox:
                sandbox.remove(self.ctx.sandbox_root)
        return assembly.result(self.scenario, self.opts, self.ctx.runs, self.steps, met)

    def _run(self) -> bool:
        """The steps; whether what they measured met the scenario's expectation."""
        ctx, steps = self.ctx, self.steps
        steps.reference = reference(ctx)
        usable(ctx, steps.reference)
        full = preflight.disk_fits(self.opts.results_dir, self.opts.workdir, self.opts.exclude, steps.reference.log)
        if full:
            raise Stop("disk-full", full)
        steps.reference = judged(steps.reference, self.opts.workdir)
        ref_log = steps.reference.log
        place(ctx, ref_log)
        armed = arm(ctx, ref_log)
        run = shared.rebuild(ctx, armed, self.opts.prefix) if self.opts.prefix is not None else None
        steps.faulted = run = run or faulted(ctx, armed, ref_log)
        if self.opts.sweep:
            return self._sweep(ref_log, armed, run)
        steps.aftermath = aftermath(ctx, armed, run)
        if steps.aftermath is not None:
            steps.faulted = run = steps.aftermath.applied(run)
        if run.carried_on:
            return self._carried_on(ref_log.trainer(), armed, run)
        scored = score_trial(ctx, ref_log, armed, run, resume(ctx, armed, ref_log))
        sent = run.result.preempted if run.result is not None else None
        steps.measured = scored.measured.found(*async_saves.unobserved_error(run.proc, armed.shown),
                                               *emergency_saves.findings(sent, run.log, run.result and run.result.returncode,
                                                                    run.fault.get("files", {})))
        return met(ctx, scored)

    def _carried_on(self, ref: ProcessLog, armed: Armed, run: Faulted) -> bool:
        """The ending of a job that carried on past its fault: its own run judged, then a later resume."""
        measured = survived(self.ctx, ref, run)
        measured, later = later_resume(self.ctx, armed, measured, compare.digest_table(run.proc, ref))
        self.steps.measured = measured.found(*async_saves.unobserved_error(run.proc, armed.shown, later),
                                             *([run.exit_crash] if run.exit_crash is not None else []))
        return survivor_met(self.ctx, self.steps.measured)

    def _sweep(self, ref: RunLog, armed: Armed, run: Faulted) -> bool:
        """The sweep ending, keeping what it measured as it goes."""
        swept = None
        for swept in sweep_save(self.ctx, ref, armed, run):
            self.steps.measured = swept.measured
        return bool(swept and swept.met)


def run_trial(scenario: Scenario, options: TrialOptions) -> Trial:
    return TrialRunner(scenario, options).run()
