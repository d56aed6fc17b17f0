"""One trial: reference run, faulted run, resume run, each in a sandbox, then the verdict."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from chaosckpt.conductor import arming, cache, confinement, crash, launcher, preflight, ranks, render, sandbox, score, sweep
from chaosckpt.conductor.loadcheck import LoadChecker
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
    reference: Optional[Path] = None
    """A finished reference run (``cache.run_reference``'s folder) to reuse instead of running one."""
    exclude: List[Path] = field(default_factory=list)
    """More paths under ``workdir`` to leave out of the sandboxes, such as the whole results folder."""
    sweep: bool = False
    """Crash after every operation of the save in turn instead of once (see ``sweep``)."""
    max_resumes: int = 3
    """With ``sweep``: full resumes for at most this many distinct disk states."""
    ckpt_dirs: List[str] = field(default_factory=list)
    """Checkpoint directories (relative to ``workdir``) to watch besides those the reference run saved into."""
    maps: List[Path] = field(default_factory=list)
    """Folders outside ``workdir`` the job writes into, overlaid so the writes land in the sandbox (``--map``)."""


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
        self._maps = confinement.maps(options.workdir, options.maps, options.results_dir)

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

    def _launch(self, name: str, argv: List[str], cwd: Path, fault: Optional[dict] = None,
                env: Optional[dict] = None, hold=None, stop_on_timeout: bool = True) -> RunResult:
        spec = RunSpec(name, argv, cwd, self.opts.results_dir / name, self.opts.timeout_s, fault, env or {}, hold,
                       self._maps)
        result = launcher.launch(spec)
        confinement.refuse_outside(result.returncode, result.stderr, [cwd, spec.log_dir, confinement.layers(cwd)])
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
        if result.timed_out and stop_on_timeout:
            raise _Stop("timeout", f"the {name} run did not finish within {self.opts.timeout_s:g} s (see {result.stderr})")
        if result.survivors:
            raise _Stop("survivors", f"after SIGKILL of the {name} run, pids {result.survivors} were still alive")
        return result

    def _sandbox(self, name: str) -> Path:
        return sandbox.create(self.opts.workdir, self.sandbox_root / name, exclude=[self.opts.results_dir, *self.opts.exclude])

    def _reference(self) -> RunLog:
        if self.opts.reference is None:
            self._launch("reference", self.opts.command, self._sandbox("reference"))
            record = self.trial.runs[-1]
        else:
            record = cache.restore(self.opts.reference, self.opts.results_dir / "reference")
            self.trial.runs.append(record)
            confinement.refuse_outside(record.returncode, Path(record.stderr), [self.opts.reference.parent])
            if record.timed_out:
                raise _Stop("timeout", f"the reference run did not finish within its time limit (see {record.stderr})")
            if record.survivors:
                raise _Stop("survivors", f"after SIGKILL of the reference run, {record.survivors} of its processes were still alive")
        stderr = Path(record.stderr)
        log = RunLog.read(Path(record.events))
        if not log.agent_loaded:
            exit_note = f"; the job exited with status {record.returncode}: {score.tail_line(stderr)}" if record.returncode else ""
            raise _Stop(
                "agent-not-loaded",
                "no event came from the job, so nothing can be scored; the agent needs a Python job that keeps "
                "PYTHONPATH (python -I and -E ignore it)" + exit_note,
            )
        if record.returncode != 0:
            raise _Stop(
                "reference-failed",
                f"the uninterrupted run exited with status {record.returncode}: "
                f"{score.tail_line(stderr) or 'no error output'} (see {stderr})",
            )
        if log.trainer() is None:
            stale = preflight.stale_checkpoint(log, self.opts.workdir)
            if stale is not None:
                raise _Stop("stale-checkpoint", stale)
            raise _Stop("no-steps-recorded", "the uninterrupted run made no step of a torch.optim optimizer")
        return log

    def _run(self) -> None:
        reference_log = self._reference()
        ref = reference_log.trainer()
        self.trial.findings.extend(score.content_findings(ref))
        scen = self.scenario
        journal = arming.needs_journal(scen, sweep=self.opts.sweep)
        ckpt_dirs = arming.checkpoint_dirs(reference_log, self.opts.ckpt_dirs)
        work = self._sandbox("faulted")
        roots = [str((work / rel).resolve()) for rel in ckpt_dirs]
        if journal:
            confinement.require_inside(roots, work)
        try:
            track = roots if journal else None
            if scen.fault == "rank-skew":
                fault = ranks.arm(scen, reference_log, track)
            else:
                fault = arming.arm(scen, reference_log, track, sweep=self.opts.sweep)
        except arming.NotArmable as exc:
            raise _Stop("fault-not-triggered", str(exc)) from None
        self._full_bytes = arming.full_bytes(reference_log, scen.trigger.save)
        disk = crash.Disk.scan(roots) if journal else None

        faulted = self._launch("faulted", self.opts.command, work, fault, hold=ranks.hold(scen, reference_log, fault))
        faulted_log = RunLog.read(faulted.events_dir)
        if not faulted_log.agent_loaded:
            raise _Stop("agent-not-loaded", f"no event came from the faulted run: {score.tail_line(faulted.stderr)}")
        proc, fault_step = score.fault_point(faulted_log)
        if proc is None:
            raise _Stop(
                "fault-not-triggered",
                f"the job finished (status {faulted.returncode}) without reaching the fault's point in save "
                f"{fault['save']}; its saves differ from the uninterrupted run's",
            )
        event = proc.fault
        completed = proc.completed_saves(before=event["ts"])
        last_good = completed[-1].step if completed else None
        self.trial.last_good_step = last_good
        self.trial.fault = {
            "kind": event["fault"],
            "save": event["save"],
            "step": fault_step,
            **{k: event[k] for k in ("write", "bytes", "op", "free_bytes") if k in event},
            "path": self._rel(event.get("path"), work),
            "files": self._files_after_fault(proc, work),
        }
        if self.opts.sweep:
            self._sweep(proc, faulted_log, ref, disk, roots, work)
            return
        if scen.fault == "power-loss":
            self._power_loss(disk, faulted_log, roots, work)
        if not faulted.fault_fired and faulted.returncode == 0:
            self._judge_survivor(ref, faulted_log.trainer() or proc, work)
            return

        resume = self._launch("resume", self.opts.resume_command, work, fault=arming.resume_fault(scen),
                              env=ranks.skew_env(scen, reference_log), stop_on_timeout=False)
        resume_log = RunLog.read(resume.events_dir)
        table = score.digest_table(proc, faulted_log.trainer(), ref)
        if resume_log.trainer() is None and resume.returncode == 0:
            raise _Stop(
                "resume-took-no-steps",
                "the resumed job exited with status 0 without a training step: it found no work left, so where it "
                "resumed from cannot be told; interrupt an earlier save (--param save=N)",
            )
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
        if disk is not None and scen.fault == "power-loss" and completed and rec.outcome != "last-good":
            trial.findings.append(self._lost_checkpoint(completed[-1], faulted_log.ops(), disk, work))

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
        ranks_ok = ranks.judge(trial, reference_log, faulted_log, resume_log, resume.returncode,
                               score.tail_line(resume.stderr), self.opts.tolerance)
        if resume.timed_out:
            if ranks_ok:
                raise _Stop("timeout", f"the resume run did not finish within {self.opts.timeout_s:g} s"
                            + (f": {ranks.where(trial.ranks)}" if trial.ranks else "") + f" (see {resume.stderr})")
            trial.findings.append(ranks.hung(trial.ranks, self.opts.timeout_s))
        recovered_ok = trial.outcome in self.scenario.expect.recovered
        if recovered_ok and baseline is not None and self.scenario.expect.reproduced:
            raise _Stop("baseline-nondeterministic", f"the faulted run differed from the uninterrupted one at step "
                        f"{baseline}, before the fault; seed every random stream and use deterministic algorithms")
        if recovered_ok and self.scenario.expect.reproduced and trial.reproduced is None:
            raise _Stop("resume-took-no-steps", f"the resumed job exited with status {resume.returncode} without a step")
        passed = ranks_ok and recovered_ok and (trial.reproduced or not self.scenario.expect.reproduced)
        trial.status = "passed" if passed else "failed"

    def _power_loss(self, disk: "crash.Disk", faulted: RunLog, roots: List[str], work: Path) -> None:
        """Rewrite the checkpoint directories into what the disk holds when the power comes back."""
        for op in faulted.ops():
            disk.apply(op)
        model = self.scenario.trigger.model
        entries = disk.after_crash(model)
        for path in crash.unseen(disk):
            entries.append(crash.Entry(path, path, os.path.getsize(path)))
            self.trial.findings.append(Finding(
                "not-interposed",
                f"{self._rel(path, work)} was written by code chaosckpt cannot see (native writes, such as "
                "safetensors'), so the power-loss model left it as the job wrote it: its durability is not judged",
                {"path": self._rel(path, work)},
            ))
        crash.materialize(entries, roots)
        self.trial.fault["model"] = model
        self.trial.fault["files"] = {self._rel(e.path, work): e.length for e in entries}

    def _sweep(self, proc: ProcessLog, faulted: RunLog, ref: ProcessLog, disk: "crash.Disk", roots: List[str],
               work: Path) -> None:
        """Every crash point of the save: its disk state, a load check, and full resumes of the first states."""
        scen = self.scenario
        target = [s for s in proc.saves if s.index == scen.trigger.save][0]
        model = scen.trigger.model if scen.fault == "power-loss" else "none"
        earlier = [s for s in proc.completed_saves() if s.index < target.index]
        last_good = earlier[-1].step if earlier else None
        self.trial.last_good_step = last_good
        self.trial.fault["model"] = model

        def name(path: str) -> str:
            return self._rel(path, work) or path

        sw = sweep.explore(disk, faulted.ops(), (target.op or 0) + 1, model, name)
        checker = LoadChecker()
        try:
            sweep.check_states(sw, roots, self.sandbox_root / "sweep-states", checker)
        finally:
            checker.close()
        table = score.digest_table(proc, faulted.trainer(), ref)
        failed = False
        for index, entries in enumerate(sw.states[: self.opts.max_resumes]):
            box = sandbox.create(work, self.sandbox_root / f"sweep-{index}")
            crash.materialize(entries, roots, lambda p, box=box: str(box / os.path.relpath(p, work.resolve())))
            result = self._launch(f"resume-state-{index}", self.opts.resume_command, box)
            rec = score.recovery(RunLog.read(result.events_dir), result.returncode, score.tail_line(result.stderr),
                                 last_good, table)
            outcome = rec.outcome + (f" (step {rec.recovered_step})" if rec.recovered_step is not None else "")
            if rec.error:
                outcome += f": {render.describe_error(rec.error, rec.error_path is not None)}"
            failed |= rec.outcome not in scen.expect.recovered
            for point in sw.points:
                if point.state == index:
                    point.outcome = outcome
        unloadable = [
            i for i in range(len(sw.states))
            if not any(f.get("loads") for p in sw.points if p.state == i for f in p.files)
        ]
        self.trial.sweep = [p.to_dict() for p in sw.points]
        self.trial.findings.append(
            Finding(
                "sweep",
                f"{len(sw.points)} crash points in save {target.index}, {len(sw.states)} distinct disk states, "
                f"{min(len(sw.states), self.opts.max_resumes)} resumed; {len(unloadable)} state(s) hold no loadable file",
                {"points": len(sw.points), "states": len(sw.states), "unloadable_states": unloadable},
            )
        )
        self.trial.status = "failed" if failed or unloadable else "passed"

    def _judge_survivor(self, ref: ProcessLog, faulted: ProcessLog, work: Path) -> None:
        """The job caught the fault and finished: judge its own trajectory, then check a later resume still loads."""
        trial = self.trial
        trial.outcome = "survived"
        traj = score.trajectory(ref, faulted, 0, self.opts.tolerance)
        trial.reproduced = traj.reproduced
        trial.compared_steps = traj.compared
        trial.first_divergent_step = traj.first_divergent_step
        trial.max_loss_diff = traj.max_loss_diff
        trial.findings.extend(traj.findings)
        resume = self._launch("resume", self.opts.resume_command, work)
        resumable = resume.returncode == 0
        if not resumable:
            failed = RunLog.read(resume.events_dir).failed_loads()
            error = failed[-1]["error"] if failed else score.tail_line(resume.stderr)
            trial.error = error
            trial.error_path = self._rel(failed[-1].get("path"), work) if failed else None
            trial.findings.append(
                Finding(
                    "no-loadable-checkpoint",
                    f"the job carried on past the fault and finished, but a later resume failed: {error}",
                    {"returncode": resume.returncode},
                )
            )
        expect = self.scenario.expect
        passed = "survived" in expect.recovered and resumable and (trial.reproduced or not expect.reproduced)
        trial.status = "passed" if passed else "failed"

    def _lost_checkpoint(self, save, ops: List[dict], disk: "crash.Disk", work: Path) -> Finding:
        """The acknowledged checkpoint the power loss took, named with the fsync it lacked."""
        path = save.path
        for op in ops:
            if op["op"] == "rename" and op["src"] == path and op["ts"] >= save.ts:
                path = op["dst"]
        model = self.scenario.trigger.model
        name = self._rel(path, work) or "a file object"
        files = sorted(p for p in disk.names if path and p.startswith(path + os.sep)) if save.path else []
        why = None
        for candidate in files or ([path] if path else []):
            why = crash.missing_durability(disk, candidate, model, lambda p: self._rel(p, work))
            if why is not None:
                if candidate != path:
                    why = f"{self._rel(candidate, work)}: {why}"
                break
        return Finding(
            "acknowledged-checkpoint-lost",
            f"the checkpoint of step {save.step} ({name}) was acknowledged, its save had returned, but it did not "
            f"survive the power loss under the {model} model: {why or 'it was not on disk'}",
            {"path": name, "step": save.step, "model": model, "missing": why},
        )

    def _save_findings(self, proc: ProcessLog, completed: list, work: Path) -> List[Finding]:
        """What the interrupted save did to the files: a torn file, an overwritten last good checkpoint."""
        broken = [s for s in proc.saves if s.index == proc.fault["save"]]
        mid_save = "write" in proc.fault
        if not mid_save or not broken or broken[0].path is None or self.trial.outcome == "last-good":
            return []
        path = self._rel(broken[0].path, work)
        if self.trial.error_path != path:
            return []  # the resume did not trip over the file the interrupted save was writing
        findings = []
        left = self.trial.fault["files"].get(path)
        if left is not None and left < self._full_bytes and os.path.exists(confinement.host_path(broken[0].path, work, self._maps)):
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
                path = confinement.host_path(save.path, work, self._maps)
                files[rel] = os.path.getsize(path) if os.path.exists(path) else None
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
