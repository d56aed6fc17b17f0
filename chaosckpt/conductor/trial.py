"""One trial: reference run, faulted run, resume run, each in a sandbox, then the verdict."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from chaosckpt.conductor import launcher, render, sandbox, score
from chaosckpt.conductor.launcher import RunResult, RunSpec
from chaosckpt.conductor.result import Finding, Reason, RunRecord, Trial
from chaosckpt.conductor.runlog import ProcessLog, RunLog
from chaosckpt.conductor.scenario import Scenario


@dataclass
class TrialOptions:
    """How to run the job: the commands, where, and how results are judged."""

    command: List[str]
    resume_command: List[str]
    workdir: Path
    results_dir: Path
    timeout_s: float = 3600.0
    tolerance: float = 0.0
    keep_sandbox: bool = False


class _Stop(Exception):
    """Ends a trial early with an inconclusive verdict."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class TrialRunner:
    """Runs the three runs of a trial and scores them."""

    def __init__(self, scenario: Scenario, options: TrialOptions) -> None:
        self.scenario = scenario
        self.opts = options
        self.trial = Trial(
            scenario=scenario.name,
            status="inconclusive",
            headline="",
            params=scenario.params(),
            tolerance=options.tolerance,
            results_dir=str(options.results_dir),
        )
        self.sandbox_root = options.results_dir / "sandboxes"
        self._full_bytes = 0

    def run(self) -> Trial:
        try:
            self._run()
        except _Stop as stop:
            self.trial.status = "inconclusive"
            self.trial.reason = stop.reason
            self.trial.detail = stop.detail
        finally:
            if not self.opts.keep_sandbox:
                sandbox.remove(self.sandbox_root)
        self.trial.headline = render.headline(self.trial)
        return self.trial

    def _launch(self, name: str, argv: List[str], cwd: Path, fault: Optional[dict] = None) -> RunResult:
        spec = RunSpec(name, argv, cwd, self.opts.results_dir / name, self.opts.timeout_s, fault)
        result = launcher.launch(spec)
        self.trial.runs.append(
            RunRecord(
                name=name,
                command=argv,
                returncode=result.returncode,
                duration_s=round(result.duration_s, 3),
                timed_out=result.timed_out,
                fault_fired=result.fault_fired,
                survivors=len(result.survivors),
                stdout=str(result.stdout),
                stderr=str(result.stderr),
                events=str(result.events_dir),
            )
        )
        if result.timed_out:
            raise _Stop("timeout", f"the {name} run did not finish within {self.opts.timeout_s:g} s (see {result.stderr})")
        if result.survivors:
            raise _Stop("survivors", f"after SIGKILL of the {name} run, pids {result.survivors} were still alive")
        return result

    def _sandbox(self, name: str) -> Path:
        return sandbox.create(self.opts.workdir, self.sandbox_root / name, exclude=[self.opts.results_dir])

    def _reference(self) -> RunLog:
        result = self._launch("reference", self.opts.command, self._sandbox("reference"))
        log = RunLog.read(result.events_dir)
        if not log.agent_loaded:
            raise _Stop(
                "agent-not-loaded",
                "no event came from the job, so nothing can be scored; the agent needs a Python job that keeps "
                "PYTHONPATH (python -I and -E ignore it)" + self._exit_note(result),
            )
        if result.returncode != 0:
            raise _Stop(
                "reference-failed",
                f"the uninterrupted run exited with status {result.returncode}: "
                f"{score.tail_line(result.stderr) or 'no error output'} (see {result.stderr})",
            )
        if log.trainer() is None:
            raise _Stop("no-steps-recorded", "the uninterrupted run made no step of a torch.optim optimizer")
        return log

    @staticmethod
    def _exit_note(result: RunResult) -> str:
        if result.returncode:
            return f"; the job exited with status {result.returncode}: {score.tail_line(result.stderr)}"
        return ""

    def _arm(self, reference: RunLog) -> dict:
        trigger = self.scenario.trigger
        saver = reference.saver()
        saves = saver.completed_saves() if saver is not None else []
        if len(saves) < trigger.save:
            raise _Stop(
                "fault-not-triggered",
                f"the uninterrupted run completed {len(saves)} checkpoint save(s) and the scenario interrupts save "
                f"{trigger.save}; use --param save=N with N <= {len(saves)}, or make the job save more often",
            )
        target = saves[trigger.save - 1]
        self._full_bytes = target.bytes
        fault = {"kind": "halt", "save": trigger.save, "rank": saver.rank}
        if trigger.write is not None:
            if trigger.write > target.writes:
                raise _Stop(
                    "fault-not-triggered",
                    f"save {trigger.save} makes {target.writes} writes; --param write={trigger.write} is past its end",
                )
            fault["at_write"] = trigger.write
        else:
            fault["at_byte"] = min(int(target.bytes * trigger.fraction), max(target.bytes - 1, 0))
        return fault

    def _run(self) -> None:
        reference_log = self._reference()
        ref = reference_log.trainer()
        fault = self._arm(reference_log)

        work = self._sandbox("faulted")
        faulted = self._launch("faulted", self.opts.command, work, fault)
        faulted_log = RunLog.read(faulted.events_dir)
        if not faulted.fault_fired:
            raise _Stop(
                "fault-not-triggered",
                f"the job finished (status {faulted.returncode}) without reaching byte/write {fault.get('at_byte', fault.get('at_write'))} "
                f"of save {fault['save']}; its saves differ from the uninterrupted run's",
            )
        proc, fault_step = score.fault_point(faulted_log)
        event = proc.fault
        completed = proc.completed_saves(before=event["ts"])
        last_good = completed[-1].step if completed else None
        self.trial.last_good_step = last_good
        self.trial.fault = {
            "save": event["save"],
            "write": event["write"],
            "bytes": event["bytes"],
            "step": fault_step,
            "path": self._rel(event.get("path"), work),
            "files": self._files_after_fault(proc, work),
        }

        resume = self._launch("resume", self.opts.resume_command, work)
        resume_log = RunLog.read(resume.events_dir)
        table = score.digest_table(proc, faulted_log.trainer(), ref)
        rec = score.recovery(resume_log, resume.returncode, score.tail_line(resume.stderr), last_good, table)
        trial = self.trial
        trial.outcome = rec.outcome
        trial.recovered_step = rec.recovered_step
        trial.error = rec.error
        trial.error_path = self._rel(rec.error_path, work)
        if rec.recovered_step is not None:
            trial.lost_steps = max(0, (fault_step or 0) - rec.recovered_step)
        elif rec.outcome == "crashed":
            trial.lost_steps = fault_step
        trial.findings.extend(self._save_findings(proc, completed, work))

        baseline = score.baseline_divergence(faulted_log.trainer() or proc, ref, self.opts.tolerance)
        if baseline is not None:
            trial.findings.append(
                Finding(
                    "baseline-nondeterministic",
                    f"before any fault, the job's step {baseline} already differed from the uninterrupted run: "
                    "two runs of the same command do not agree, so a resume cannot be judged against them; "
                    "seed every random stream and use deterministic algorithms",
                    {"step": baseline},
                )
            )
        resume_trainer = resume_log.trainer()
        if rec.recovered_step is not None and resume_trainer is not None:
            traj = score.trajectory(ref, resume_trainer, rec.recovered_step, self.opts.tolerance)
            trial.reproduced = traj.reproduced
            trial.compared_steps = traj.compared
            trial.first_divergent_step = traj.first_divergent_step
            trial.max_loss_diff = traj.max_loss_diff
            trial.findings.extend(traj.findings)
        recovered_ok = rec.outcome in self.scenario.expect.recovered
        if recovered_ok and baseline is not None and self.scenario.expect.reproduced:
            raise _Stop("baseline-nondeterministic", f"the faulted run differed from the uninterrupted one at step "
                        f"{baseline}, before the fault; seed every random stream and use deterministic algorithms")
        if recovered_ok and self.scenario.expect.reproduced and trial.reproduced is None:
            raise _Stop("resume-took-no-steps", f"the resumed job exited with status {resume.returncode} without a step")
        passed = recovered_ok and (trial.reproduced or not self.scenario.expect.reproduced)
        trial.status = "passed" if passed else "failed"

    def _save_findings(self, proc: ProcessLog, completed: list, work: Path) -> List[Finding]:
        """What the interrupted save did to the files: a torn file, an overwritten last good checkpoint."""
        broken = [s for s in proc.saves if s.index == proc.fault["save"]]
        if not broken or broken[0].path is None or self.trial.outcome == "last-good":
            return []
        path = self._rel(broken[0].path, work)
        findings = []
        left = self.trial.fault["files"].get(path)
        if left is not None and left < self._full_bytes and os.path.exists(broken[0].path):
            findings.append(
                Finding(
                    "torn-checkpoint",
                    f"the interrupted save {broken[0].index} left {path} with {left} of its {self._full_bytes} bytes",
                    {"path": path, "bytes": left, "full_bytes": self._full_bytes},
                )
            )
        earlier = [s for s in completed if s.path == broken[0].path]
        if earlier:
            findings.append(
                Finding(
                    "in-place-save",
                    f"save {broken[0].index} wrote straight over {path}, which held the checkpoint of step "
                    f"{earlier[-1].step}: the old checkpoint was gone as soon as the save began. Save to a temporary "
                    "name in the same directory, flush and fsync it, then os.replace() it over the old name",
                    {"path": path, "overwritten_step": earlier[-1].step},
                )
            )
        return findings

    def _files_after_fault(self, proc: ProcessLog, work: Path) -> dict:
        """Size on disk (or null: missing) of every file the job saved to, as the fault left them."""
        files = {}
        for save in proc.saves:
            if save.path is not None:
                rel = self._rel(save.path, work)
                files[rel] = os.path.getsize(save.path) if os.path.exists(save.path) else None
        return files

    @staticmethod
    def _rel(path: Optional[str], work: Path) -> Optional[str]:
        if path is None:
            return None
        try:
            return str(Path(path).relative_to(work.resolve()))
        except ValueError:
            return path


def run_trial(scenario: Scenario, options: TrialOptions) -> Trial:
    return TrialRunner(scenario, options).run()
