"""Preemption without a trial: which signals a job can be sent, what the kernel says a process does with one, which
process is the job's launcher inside its confinement, and the findings drawn from a run's events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from chaosckpt.conductor.runs import confinement, launcher, signalling
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial import emergency_saves as judged

SENT_TS = 1000.0


@pytest.mark.parametrize("text, number", [("SIGTERM", 15), ("TERM", 15), ("sigusr1", int(signal.SIGUSR1)),
                                          ("15", 15), (2, 2), ("SIGKILL", None), ("STOP", None), ("BOGUS", None),
                                          ("", None), (True, None), (999, None)])
def test_a_signal_is_named_as_schedulers_name_it_and_never_one_no_job_can_handle(text, number):
    assert signalling.signal_named(text) == number


@pytest.mark.parametrize("setup, expected", [("", "default"),
                                             ("signal.signal(signal.SIGTERM, lambda *a: None)", "handled"),
                                             ("signal.signal(signal.SIGTERM, signal.SIG_IGN)", "ignored")])
def test_what_a_process_does_with_the_signal_is_read_from_the_kernel(setup, expected):
    code = f"import signal, sys, time\n{setup}\nprint('ready', flush=True)\ntime.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        assert signalling.disposition(proc.pid, signal.SIGTERM) == expected
    finally:
        proc.kill()
        proc.wait()
    assert signalling.disposition(proc.pid, signal.SIGTERM) == "gone"


def test_the_launcher_is_the_job_s_first_process_not_the_confinement_around_it(held_by, tmp_path):
    box, log = tmp_path / "box", tmp_path / "log"
    box.mkdir()
    log.mkdir()
    script = box / "job.sh"  # the kernel runs it as /bin/sh ./job.sh: the launcher's line is not its argv
    script.write_text("#!/bin/sh\nsleep 30\ntrue\n")
    script.chmod(0o755)
    job = ["./job.sh"]
    argv, env = confinement.command(job, box, log, [])
    root = subprocess.Popen(argv, cwd=box, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 20
        found = None
        while found is None and time.monotonic() < deadline:
            found = signalling.launcher_of(job, launcher.job_processes(psutil.Process(root.pid)))
            time.sleep(0.05)
        assert found is not None and found.cmdline() == ["/bin/sh", "./job.sh"] and found.pid != root.pid
    finally:
        root.kill()
        root.wait()


def events(pid=2, rank=None, steps=20, saves=(), exited=True):
    """One process's events: steps 1..``steps`` a second apart from ts 1000 - 16 (step 16 at the signal), and
    ``saves`` as (index, step, began_ts, ok, path, bytes)."""
    out = [{"t": "hello", "pid": pid, "rank": rank, "ts": 900.0, "cwd": "/w"}]
    out += [{"t": "step", "pid": pid, "step": n, "ts": SENT_TS - 16 + n} for n in range(1, steps + 1)]
    for index, step, began, ok, path, size in saves:
        out.append({"t": "save-begin", "pid": pid, "save": index, "step": step, "digest": "d", "ts": began})
        if ok is not None:
            out.append({"t": "save-file", "pid": pid, "save": index, "path": path, "bytes": size, "ok": ok})
            out.append({"t": "save-end", "pid": pid, "save": index, "ok": ok, "bytes": size, "writes": 1,
                        "ts": began + 0.25})
    if exited:
        out.append({"t": "exit", "pid": pid})
    return out


def sent(**fields):
    return {"signal": "SIGTERM", "target": "all", "grace_s": 0.5, "ts": SENT_TS, "sent_to": [2], "launcher": 2,
            "ranks": {"0": 2}, "handling": {"2": "handled"}, "ended_in_grace": True, "ended_after_s": 0.2, **fields}


PERIODIC = [(1, 8, 990.0, True, "/w/ckpt/last.pt", 3000), (2, 16, 999.0, True, "/w/ckpt/last.pt", 3000)]


def kinds(found):
    return {f.kind: f for f in found}


def test_an_emergency_save_cut_over_the_last_checkpoint_is_torn_and_one_beside_it_too_long():
    log = RunLog.of([events(steps=17, saves=[*PERIODIC, (3, 17, SENT_TS + 0.1, None, None, 0)], exited=False)])
    cut = sent(ended_in_grace=False, ended_after_s=None)
    torn = kinds(judged.findings(cut, log, -9, {"ckpt/last.pt": 1024}))
    assert set(torn) == {"emergency-save-torn"}
    assert torn["emergency-save-torn"].details["overwritten_step"] == 16
    assert "0.4 s when the SIGKILL came at the end of the 0.5 s grace" in torn["emergency-save-torn"].message
    beside = kinds(judged.findings(cut, log, -9, {"ckpt/last.pt": 3000}))
    assert set(beside) == {"emergency-save-too-long"} and beside["emergency-save-too-long"].severity == "warning"


def test_a_save_that_landed_within_the_grace_is_no_finding():
    log = RunLog.of([events(steps=17, saves=[*PERIODIC, (3, 17, SENT_TS + 0.1, True, "/w/ckpt/last.pt", 3000)])])
    assert judged.findings(sent(), log, 0, {"ckpt/last.pt": 3000}) == []
    record = judged.record(sent(), log, 16, 0)
    assert record["saves_after"] == [{"rank": 0, "save": 3, "step": 17, "began_after_s": 0.1, "took_s": 0.25,
                                      "finished": True}]
    assert record["exit"] == 0
    assert record["sent_to"] == ["rank 0"] and record["handling"] == {"rank 0": "handled"}


def test_exiting_0_without_a_checkpoint_of_the_step_reached_is_an_error_and_no_save_a_warning():
    log = RunLog.of([events(steps=16, saves=PERIODIC[:1])])
    found = kinds(judged.findings(sent(), log, 0, {}))
    assert set(found) == {"no-emergency-save", "exit-0-after-preemption"}
    assert found["exit-0-after-preemption"].severity == "error"
    assert found["no-emergency-save"].details["steps_lost"] == 8
    assert "exited without saving" in found["no-emergency-save"].message
    assert set(kinds(judged.findings(sent(), log, 1, {}))) == {"no-emergency-save"}  # requeued on a failure status
    default = sent(handling={"2": "default"})
    assert "no handler" in kinds(judged.findings(default, log, -15, {}))["no-emergency-save"].message


def test_nothing_is_lost_when_the_signal_came_right_after_a_checkpoint_of_the_step():
    log = RunLog.of([events(steps=16, saves=PERIODIC)])
    assert judged.findings(sent(), log, 0, {}) == []


def test_nothing_is_lost_when_the_signal_ended_the_job_inside_a_save_after_it_finished_a_whole_state():
    """own_path_job.py: the SIGTERM's default action ends the job between ``step_16.pt`` (finished, a whole training
    state) and ``current.pt`` of save 2: step 16 is saved, no step is lost, as the kill that lands there says."""
    out = events(steps=16, saves=PERIODIC[:1], exited=False)
    out += [{"t": "save-begin", "pid": 2, "save": 2, "step": 16, "digest": "d", "ts": 999.0},
            {"t": "save-file", "pid": 2, "save": 2, "path": "/w/ckpt/step_16.pt", "bytes": 3000, "ok": True,
             "whole": True},
            {"t": "fault", "pid": 2, "fault": "preempt", "save": 2, "write": 1, "bytes": 0,
             "path": "/w/ckpt/current.pt", "ts": SENT_TS}]
    default = sent(handling={"2": "default"}, ended_in_grace=True)
    assert "no-emergency-save" not in kinds(judged.findings(default, RunLog.of([out]), -15, {}))
    out = [e for e in out if e.get("path") != "/w/ckpt/step_16.pt"]  # nothing of save 2 finished: 8 steps lost
    lost = kinds(judged.findings(default, RunLog.of([out]), -15, {}))["no-emergency-save"]
    assert lost.details["steps_lost"] == 8


def test_a_rank_the_launcher_never_signalled_that_trained_on_is_named():
    rank0 = events(pid=3, rank=0, steps=20, saves=PERIODIC[:1], exited=False)
    rank1 = events(pid=4, rank=1, steps=20, saves=[], exited=False)
    log = RunLog.of([rank0, rank1])
    record = sent(target="launcher", sent_to=[1], launcher=1, ranks={"0": 3, "1": 4},
                  handling={"1": "default", "3": "handled", "4": "handled"}, ended_in_grace=False)
    found = kinds(judged.findings(record, log, -9, {}))
    assert found["signal-missed-ranks"].details["ranks"] == [0, 1]
    assert "never reached its trainer" in found["no-emergency-save"].message
    assert judged.record(record, log, 16, -9)["handling"] == {"launcher": "default", "rank 0": "handled",
                                                        "rank 1": "handled"}
