"""The judge: a generated job's truth under a fault, established by experiment, sharing no code with chaosckpt.

For one job (a row of ``jobgen``'s covering array) and one fault it runs

1. the job uninterrupted under ``strace -f -y`` (its record: every write, open, rename, unlink and fsync, the job's
   own printed lines among them), which is also the reference trajectory;
2. the job again, faulted by strace or a signal, never by chaosckpt:
   ``kill``   ``strace -e inject=write:signal=SIGKILL:when=N -P FILE``: SIGKILL at the N-th write of the file that
              save K writes, N the middle of that save's writes to it in the record;
   ``enospc`` ``strace -e inject=write:error=ENOSPC:when=N -P FILE``: that write fails with ENOSPC in the job;
   ``step``   SIGKILL as soon as the job printed the step line one after save K (a clean kill between saves);
3. the job's own resume (the same command, in the same folder).

Truth: the checkpoints that completed before the fault (the job printed ``saved step S``), which files are on disk
and which of them load; the step the resume started from (its ``resumed from step S`` line) against the newest
completed one (outcome last-good / older / scratch / unknown-state / crashed, or survived when the faulted run
finished); the steps lost; whether every resumed step's loss equals the uninterrupted run's bitwise (the printed
``repr``); and the cause kinds the chosen dimensions imply for what the experiment showed (``expected_causes``).
A job that survived a full disk passes only where the faulted save still completed: one whose saver thread died on
the error while the training finished, none the wiser, lost a checkpoint it counts on (``save_failed_unnoticed``).
A job whose uninterrupted run ends with its last checkpoint never landed (a daemon saver the exit stopped) fails
whatever the fault did (``final_save_lost``).

Power loss (a disk model computed from the strace record: what was not fsynced rolled back) is not here yet.

This module imports nothing from chaosckpt (tests/test_generated_jobs.py parses its imports to check it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import jobgen

FAULTS = ("kill", "enospc", "step")
ALLOWED = {"kill": ("last-good",), "step": ("last-good",), "enospc": ("last-good", "survived")}
"""The outcomes that pass under each fault, as chaosckpt's own scenarios define them (kill9-mid-save: last-good;
enospc: last-good or survived): the same bar, judged independently."""

VOCABULARY = ("torn-checkpoint", "in-place-save", "rotation-before-complete", "resume-chose-incomplete",
              "resume-chose-older", "optimizer-not-restored", "scheduler-not-restored", "rng-not-restored",
              "epoch-order-differs", "epoch-order-replayed", "steps-replayed", "steps-skipped", "eval-mode-in-training",
              "resumed-other-weights", "background-error-unobserved", "exit-with-save-in-flight")
"""The cause kinds the judge predicts; chaosckpt's findings are compared on these only."""

STEP = re.compile(r"^step (\d+) loss (\S+)(?: batch (\S+))?$")
SAVED = re.compile(r"^saved step (\d+)$")
RESUMED = re.compile(r"^resumed from step (\d+)$")
WRITE = re.compile(r"^(\d+) +write\((\d+)<([^>]*)>, \"((?:[^\"\\]|\\.)*)\"")
TIMEOUT = 300


@dataclass
class Printed:
    """What one run of a job printed, and how it ended."""
    returncode: int
    steps: List[Tuple[int, str]] = field(default_factory=list)
    saved: List[int] = field(default_factory=list)
    resumed: Optional[int] = None
    finished: bool = False
    cannot_load: List[str] = field(default_factory=list)
    stderr_tail: str = ""
    batches: Dict[int, str] = field(default_factory=dict)
    """Each step's batch, by the sum of its inputs."""

    @property
    def last_step(self) -> int:
        return self.steps[-1][0] if self.steps else 0


def printed(returncode: int, out: str, err: str = "") -> Printed:
    p = Printed(returncode, stderr_tail="\n".join(err.strip().splitlines()[-3:]))
    for line in out.splitlines():
        line = line.strip()
        if m := STEP.match(line):
            p.steps.append((int(m[1]), m[2]))
            if m[3] is not None:
                p.batches[int(m[1])] = m[3]
        elif m := SAVED.match(line):
            p.saved.append(int(m[1]))
        elif m := RESUMED.match(line):
            p.resumed = int(m[1])
        elif line == "finished":
            p.finished = True
        elif line.startswith("cannot load "):
            p.cannot_load.append(line.split(":")[0][len("cannot load "):])
    return p


def run(argv: List[str], cwd: Path) -> Printed:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    return printed(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class Save:
    """One save in the strace record: the step it followed, and its writes as (path relative to the job's folder,
    the write's number among the writes of its thread to that path: strace's ``when=N`` counts each thread apart)."""
    step: int
    writes: List[Tuple[str, int]] = field(default_factory=list)


def saves_in_record(log: str, ckpt: Path, every: int = 1) -> List[Save]:
    """The saves of an uninterrupted run from its strace record, in the order of their steps. A save opens at the
    printed ``step S`` line of a step that saves (``S % every == 0``) and closes at ``saved step S``; a write to a
    file under ``ckpt`` belongs to the open save its thread writes, or, for a thread writing none, to the oldest open
    save no thread writes yet (a saver thread may still be writing one save when the next one opens)."""
    counts: Dict[Tuple[str, str], int] = {}
    opened: List[Save] = []
    writer: Dict[str, Save] = {}
    done: List[Save] = []
    prefix = str(ckpt) + os.sep
    root = str(ckpt.parent) + os.sep
    for line in log.splitlines():
        m = WRITE.match(line)
        if not m:
            continue
        thread, path, data = m[1], m[3], m[4]
        if m[2] == "1":
            text = data.encode().decode("unicode_escape").strip()
            if (s := STEP.match(text)) and int(s[1]) % every == 0:
                opened.append(Save(int(s[1])))
            elif s := SAVED.match(text):
                closing = next((o for o in opened if o.step == int(s[1])), None)
                if closing is not None:
                    opened.remove(closing)
                    done += [closing] if closing.writes else []
            continue
        if not path.startswith(prefix):
            continue
        rel = path[len(root):]
        counts[(thread, rel)] = counts.get((thread, rel), 0) + 1
        save = writer.get(thread)
        if save is None or all(save is not o for o in opened):
            save = next((o for o in opened if all(o is not w for w in writer.values())), None)
            if save is None:
                continue
            writer[thread] = save
        save.writes.append((rel, counts[(thread, rel)]))
    return sorted(done, key=lambda d: d.step)


def place(save: Save) -> Tuple[str, int]:
    """The file save K writes most and the number of the write halfway through its writes of it."""
    per: Dict[str, List[int]] = {}
    for path, n in save.writes:
        per.setdefault(path, []).append(n)
    path = max(per, key=lambda p: len(per[p]))
    numbers = per[path]
    return path, numbers[(len(numbers) - 1) // 2]


def loadable(folder: Path) -> Dict[str, Optional[int]]:
    """Each checkpoint file under ``folder/ckpt`` (temporaries too): the step it was saved at when it loads, else
    None. Loaded in a subprocess of its own (torch, not the job's code)."""
    code = ("import glob, json, os, torch\nout = {}\n"
            "for p in sorted(glob.glob('ckpt/*')):\n"
            "    try:\n        out[os.path.basename(p)] = int(torch.load(p, weights_only=False)['saved_at'])\n"
            "    except Exception:\n        out[os.path.basename(p)] = None\n"
            "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=TIMEOUT)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


@dataclass
class Truth:
    job: str
    fault: str
    save: int
    placement: str
    fault_step: int = 0
    completed: List[int] = field(default_factory=list)
    last_good: Optional[int] = None
    on_disk: Dict[str, Optional[int]] = field(default_factory=dict)
    outcome: str = ""
    recovered_step: Optional[int] = None
    lost_steps: Optional[int] = None
    lost_from_save: Optional[int] = None
    """The steps lost counted from the faulted save's step, not from the last step trained: a saver thread's save
    lets training go on while it writes, for as long as the machine's load makes it; chaosckpt holds the training
    thread at that save's step, so for a thread saver its count is compared with this one."""
    reproduced: Optional[bool] = None
    first_divergent_step: Optional[int] = None
    verdict: str = ""
    expected_causes: List[str] = field(default_factory=list)
    fault_in_final_name: bool = False
    """The fault struck the checkpoint's own name, not a temporary (the save writes in place)."""
    first_batch: Optional[str] = None
    """Where the resume's first batch stands in the uninterrupted run's (``data_position``): the experiment that
    tells steps replayed from steps skipped."""
    final_save_lost: bool = False
    """The uninterrupted run reached the end of its script, and its last checkpoint never landed (neither its
    ``saved`` line nor a file of it that loads): the exit stopped a saver nobody waited for."""
    save_failed_unnoticed: bool = False
    """The job finished though the faulted save never completed (an error in a saver thread, which the training
    never saw): a checkpoint the job counts on is not there, and no line of the job says so."""
    resume_cannot_load: List[str] = field(default_factory=list)
    """Files the resume reported it could not load (newest_loads) before the one it took."""
    notes: List[str] = field(default_factory=list)
    seconds: float = 0.0


def data_position(reference: Dict[int, str], recovered: int, first: Optional[str]) -> Optional[str]:
    """Where the resume's first batch (``first``) stands in the uninterrupted run's batches, against the step after
    its checkpoint: ``in-order``; ``replayed`` (a batch the checkpoint already holds) or ``skipped`` (a later one);
    ``order-replayed`` (another epoch's batch at this same place in its epoch: the epoch reads another epoch's
    order); ``unseen`` (a batch no step trained). Data that repeats every epoch (a slice by step, a counter) is
    placed by its position in the epoch."""
    if first is None:
        return None
    expected = recovered + 1
    if reference.get(expected) == first:
        return "in-order"
    seen = sorted(k for k, b in reference.items() if b == first)
    if not seen:
        return "unseen"
    place, here = (seen[0] - 1) % jobgen.EPOCH, (expected - 1) % jobgen.EPOCH
    if len(seen) > 1:
        return "replayed" if place < here else "skipped"
    if place == here:
        return "order-replayed"
    return "replayed" if seen[0] <= recovered else "skipped"


def fresh(folder: Path, row: Dict[str, str]) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(jobgen.script(row))
    return folder


class Reference(NamedTuple):
    """What the uninterrupted runs established, once per job: its printed lines, its saves in the strace record,
    and whether its last checkpoint never lands (``final_save_lost``)."""
    printed: Printed
    saves: List[Save]
    final_save_lost: bool


def record(scratch: Path, row: Dict[str, str]) -> Reference:
    """The uninterrupted run under strace's record, in ``scratch/reference``."""
    folder = fresh(scratch / "reference", row)
    log = folder / "strace.log"
    p = run(["strace", "-f", "-qq", "-y", "-s", "96", "-o", str(log), "-e",
             "trace=write,openat,rename,renameat,renameat2,unlink,unlinkat,fsync,fdatasync",
             sys.executable, "train.py"], folder)
    saves = saves_in_record(log.read_text(errors="replace"), (folder / "ckpt").resolve(), int(row["every"]))
    return Reference(p, saves, final_save_lost(row, scratch, p, saves))


def faulted(folder: Path, fault: str, save: Save) -> Tuple[Printed, str]:
    """The faulted run; and where the fault was placed, in words."""
    if fault == "step":
        target = save.step + 1
        proc = subprocess.Popen([sys.executable, "train.py"], cwd=folder, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        out = []
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            m = STEP.match(line.strip())
            if m and int(m[1]) >= target:
                proc.send_signal(signal.SIGKILL)
                break
        rest, err = proc.communicate(timeout=TIMEOUT)
        return printed(proc.returncode, "".join(out) + rest, err), f"SIGKILL on the line of step {target}"
    rel, n = place(save)
    action = "signal=SIGKILL" if fault == "kill" else "error=ENOSPC"
    p = run(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=write", "-e", f"inject=write:{action}:when={n}",
             "-P", str(folder.resolve() / rel), sys.executable, "train.py"], folder)
    return p, f"{action} at write {n} of {rel} (save of step {save.step})"


def causes(row: Dict[str, str], truth: Truth) -> List[str]:
    """The cause kinds the chosen dimensions imply for what the experiment showed. Checkpoint-loss causes where the
    outcome fails; trajectory causes where the resume took a checkpoint and did not reproduce; a resume left in eval
    mode wherever the resume took a checkpoint (a fact of the run even where no dropout makes it change a loss)."""
    out = []
    if truth.outcome not in ALLOWED[truth.fault]:
        if truth.fault_in_final_name and truth.fault != "step":
            if row["rotation"] == "overwrite":  # the struck name held the previous checkpoint
                out.append("in-place-save")
            if truth.resume_cannot_load or truth.outcome == "crashed":
                out.append("torn-checkpoint")
            if truth.outcome == "crashed" and row["rotation"] != "overwrite":
                out.append("resume-chose-incomplete")
        if row["rotation"] == "delete_before" and truth.fault != "step":
            out.append("rotation-before-complete")
    if truth.outcome in ("last-good", "older", "survived") and truth.reproduced is False:
        rec = truth.recovered_step or 0
        if row["saved"] == "no_optimizer":
            out.append("optimizer-not-restored")
        if row["saved"] == "no_scheduler":
            out.append("scheduler-not-restored")
        if (row["draws"] == "dropout" and row["rng"] == "none") or (row["draws"] == "python" and row["rng"] != "all"):
            out.append("rng-not-restored")
        if row["data"] in ("loader_global", "workers"):  # the global RNG orders the epoch
            if rec % jobgen.EPOCH and truth.first_batch == "unseen":
                out.append("epoch-order-differs")
            elif not rec % jobgen.EPOCH and row["rng"] == "none":
                out.append("rng-not-restored")
        if truth.first_batch in ("replayed", "skipped"):
            out.append(f"steps-{truth.first_batch}")
        elif truth.first_batch == "order-replayed":
            out.append("epoch-order-replayed")
    if truth.save_failed_unnoticed:
        out.append("background-error-unobserved")
    if truth.final_save_lost:
        out.append("exit-with-save-in-flight")
    resumed = bool(truth.recovered_step) and truth.outcome not in ("crashed", "survived")
    if resumed and row["quirk"] == "no_train_after_val":
        out.append("eval-mode-in-training")
    if resumed and row["quirk"] == "ema_weights":  # the model starts from the EMA copy's weights
        out.append("resumed-other-weights")
    return sorted(set(out))


def final_save_lost(row: Dict[str, str], scratch: Path, ref: Printed, saves: List[Save]) -> bool:
    """Whether the job's last checkpoint never lands (neither its ``saved`` line nor a file of it that loads): in
    the uninterrupted run under strace, or, for a saver thread, in one more uninterrupted run (in ``scratch/slowed``)
    whose last save's file is slowed to 0.3 s a write (strace ``inject=write:delay_enter``). A job that waits for its
    saves lands it all the same; one whose saver nobody waits for exits first, as it does in any run where the save
    takes longer than the rest of the script: the experiment asks that question, not which way one run's race
    fell."""
    final = jobgen.STEPS - jobgen.STEPS % int(row["every"])
    if final not in ref.saved and final not in loadable(scratch / "reference").values():
        return True
    if row["saver"] == "sync" or not saves:
        return False
    slowed = fresh(scratch / "slowed", row)
    # the last save's file, or (its line lost to the exit in the record) the name the save before it used, with
    # its step's number in the last one's place
    target = slowed.resolve() / place(saves[-1])[0].replace(f"{saves[-1].step:06d}", f"{final:06d}")
    got = run(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=write", "-e",
               "inject=write:delay_enter=300000", "-P", str(target), sys.executable, "train.py"], slowed)
    return final not in got.saved and final not in loadable(slowed).values()


def judge(row: Dict[str, str], fault: str, scratch: Path, save_number: int = 2,
          reference: Optional[Reference] = None) -> Tuple[Truth, Reference]:
    """The truth of one job under one fault at save ``save_number`` (1-based); the reference (record) is returned for
    reuse by the job's other faults."""
    started = time.monotonic()
    if reference is None:
        reference = record(scratch, row)
    ref, saves = reference.printed, reference.saves
    truth = Truth(jobgen.job_id(row), fault, save_number, "")
    if not ref.finished or len(saves) < save_number:
        truth.verdict = "ERROR"
        truth.notes.append(f"uninterrupted run: finished={ref.finished}, {len(saves)} saves seen in the record; "
                           f"{ref.stderr_tail}")
        return truth, reference
    save = saves[save_number - 1]
    truth.final_save_lost = reference.final_save_lost
    folder = fresh(scratch / fault, row)
    run_, truth.placement = faulted(folder, fault, save)
    truth.fault_step = run_.last_step
    truth.on_disk = loadable(folder)
    # complete: the job said so, or its file is on disk and loads (a kill between the file's last byte and the line)
    truth.completed = sorted(set(run_.saved) | {s for s in truth.on_disk.values() if s is not None})
    truth.last_good = truth.completed[-1] if truth.completed else None
    held = truth.fault_step != save.step and row["saver"] == "sync"  # a saver thread's save lets training go on
    if fault != "step" and (save.step in run_.saved or truth.fault_step < save.step or held):
        truth.notes.append(f"the fault did not land inside the save of step {save.step} (last step {truth.fault_step},"
                           f" saved {run_.saved})")
    truth.fault_in_final_name = fault != "step" and not place(save)[0].endswith(".tmp")
    if run_.finished:  # the end of its script: whatever its interpreter's shutdown then did to the exit status
        if run_.returncode:
            truth.notes.append(f"the faulted run finished, then exited with status {run_.returncode}")
        truth.outcome, truth.recovered_step = "survived", None  # nothing resumed: no steps lost to count
        truth.save_failed_unnoticed = save.step not in truth.completed
        resume = run_
        resumed_steps = []
    else:
        resume = run([sys.executable, "train.py"], folder)
        truth.resume_cannot_load = resume.cannot_load
        resumed_steps = resume.steps
        rec = resume.resumed
        if rec is None and not resume.steps:
            truth.outcome = "crashed"
            truth.notes.append(f"resume exited {resume.returncode}: {resume.stderr_tail[-200:]}")
        elif rec is None:
            truth.outcome, truth.recovered_step = "scratch", 0
        elif rec == truth.last_good:
            truth.outcome, truth.recovered_step = "last-good", rec
        elif rec in truth.completed:
            truth.outcome, truth.recovered_step = "older", rec
        else:
            truth.outcome, truth.recovered_step = "unknown-state", rec
        if truth.recovered_step is not None:
            first = resume.batches.get(resume.steps[0][0]) if resume.steps else None
            truth.first_batch = data_position(ref.batches, truth.recovered_step, first)
            truth.lost_steps = max(0, truth.fault_step - truth.recovered_step)
            truth.lost_from_save = max(0, save.step - truth.recovered_step)
        elif truth.outcome == "crashed":
            truth.lost_steps, truth.lost_from_save = truth.fault_step, save.step
    if truth.outcome != "crashed":
        expected = dict(ref.steps)
        same = [(s, loss == expected.get(s)) for s, loss in resumed_steps]
        bad = [s for s, ok in same if not ok]
        first = resumed_steps[0][0] if resumed_steps else None
        contiguous = [s for s, _ in resumed_steps] == list(range(first, jobgen.STEPS + 1)) if first else True
        truth.reproduced = not bad and resume.finished and contiguous
        truth.first_divergent_step = bad[0] if bad else None
        if not contiguous:
            truth.notes.append(f"resumed steps {resumed_steps[0][0]}..{resumed_steps[-1][0]} not one run to the end")
    passed = (truth.outcome in ALLOWED[fault] and truth.reproduced is True and not truth.save_failed_unnoticed
              and not truth.final_save_lost)
    truth.verdict = "PASS" if passed else "FAIL"
    truth.expected_causes = causes(row, truth)
    truth.seconds = round(time.monotonic() - started, 1)
    return truth, reference


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description="the judge's truth of generated jobs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--fault", action="append", choices=FAULTS)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/judge"))
    args = parser.parse_args(argv)
    for i, row in enumerate(jobgen.sample(args.jobs, args.seed)):
        reference = None
        for fault in args.fault or list(FAULTS):
            truth, reference = judge(row, fault, args.scratch / str(i), reference=reference)
            print(json.dumps(asdict(truth)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
