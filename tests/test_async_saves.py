"""Saves that overlap training: a checkpoint written on a background thread is that thread's until its work
ends, its step the one its state was taken at; what the agent reports of it (events, faults, its error's fate)
and the findings the conductor draws from them."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from chaosckpt import protocol
from chaosckpt.agent import threads
from chaosckpt.conductor.reports import html
from chaosckpt.conductor.runs.runlog import RunLog, _process
from chaosckpt.conductor.trial import async_saves
from tests.test_checkpoint_burst import _job, _save, _step


def _background(rec, work):
    """Run ``work`` on a thread as the agent's patched ``Thread.start`` does: handed the step it starts at."""
    handoff = rec.handoff()
    thread = threading.Thread(target=threads._carried, args=(rec, handoff, work), name="saver")
    thread.start()
    return thread


def _steps_until(rec, opt, done, limit=2000):
    """Training steps on this thread until ``done()`` (the saver reached its point)."""
    for _ in range(limit):
        if done():
            return
        _step(rec, opt)
        time.sleep(0.001)
    raise AssertionError("the background save never got there")


def test_a_background_save_stays_one_checkpoint_across_training_steps(tmp_path):
    """The thread's rename, made after the training stepped on, is its checkpoint's; the checkpoint's step is
    the step the thread was handed its state at, and it ends when the thread's work does."""
    events, rec, model, opt = _job()
    for _ in range(3):
        _step(rec, opt)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    tmp, last = str(tmp_path / "last.pt.tmp"), str(tmp_path / "last.pt")
    saved, go_on = threading.Event(), threading.Event()

    def write():
        _save(rec, state, tmp)
        saved.set()
        go_on.wait(10)
        rec.begin_move({"how": "rename", "src": tmp, "dst": last})
        os.replace(tmp, last)
        rec.emit("save-move", save=rec.checkpoint.index, how="rename", src=tmp, dst=last, ok=True)
        rec.end_move()

    thread = _background(rec, write)
    _steps_until(rec, opt, saved.is_set)
    _step(rec, opt)
    go_on.set()
    thread.join()
    log = _process(events.events)
    (save,) = log.saves
    assert (save.step, save.thread, save.ok) == (3, "saver", True)
    assert [m["dst"] for m in save.moves] == [last]
    kinds = events.kinds()
    begin, move, end = kinds.index("save-begin"), kinds.index("save-move"), kinds.index("save-end")
    assert begin < move < end and "step" in kinds[begin:move]


def test_a_save_still_written_at_exit_is_unfinished_and_the_reference_finds_it(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    writing, stop = threading.Event(), threading.Event()

    def write():
        with rec.recording_save(str(tmp_path / "last.pt"), "path", {"w": torch.zeros(2)}):
            writing.set()
            stop.wait(10)

    thread = _background(rec, write)
    writing.wait(10)
    rec.at_exit()
    stop.set()
    thread.join()
    ends = [e for e in events.events if e["t"] == "save-end"]
    assert ends[0]["unfinished"] and not ends[0]["ok"]
    log = _process(events.events)
    log.hello = {"cwd": str(tmp_path)}
    (finding,) = async_saves.unfinished_at_exit(log)
    assert finding.kind == "exit-with-save-in-flight" and protocol.SEVERITY[finding.kind] == "error"
    assert finding.details == {"save": 1, "step": 1, "thread": "saver", "path": "last.pt", "begun": True}


def test_a_background_save_that_ended_before_the_exit_is_complete(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    _background(rec, lambda: _save(rec, {"w": torch.zeros(2)}, str(tmp_path / "last.pt"))).join()
    rec.at_exit()
    ends = [e for e in events.events if e["t"] == "save-end"]
    assert len(ends) == 1 and ends[0]["ok"] and "unfinished" not in ends[0]
    assert async_saves.unfinished_at_exit(_process(events.events)) == []


def test_a_fault_with_steps_in_flight_waits_for_the_training_to_step(tmp_path):
    events, rec, model, opt = _job({"v": 1, "kind": "enospc", "save": 1, "at_write": 1, "steps_in_flight": 3,
                                    "handed_step": 1})
    _step(rec, opt)
    raised = []

    def write():
        try:
            _save(rec, {"w": torch.zeros(64)}, str(tmp_path / "last.pt"))
        except OSError as exc:
            raised.append(exc)

    thread = _background(rec, write)
    _steps_until(rec, opt, lambda: bool(raised))
    thread.join()
    (fault,) = [e for e in events.events if e["t"] == "fault"]
    assert fault["thread"] == "saver" and fault["held"]
    assert (fault["steps_in_flight"], fault["training_step"]) == (3, 4)


def test_a_background_error_a_future_raises_is_observed_and_one_never_raised_is_not(tmp_path):
    for look in (True, False):
        events, rec, model, opt = _job({"v": 1, "kind": "enospc", "save": 1, "at_write": 1})
        _step(rec, opt)
        errors = []

        def write():
            try:
                _save(rec, {"w": torch.zeros(8)}, str(tmp_path / "last.pt"))
            except OSError as exc:
                errors.append(exc)

        _background(rec, write).join()
        if look:
            try:
                raise RuntimeError("the save failed") from errors[0]
            except RuntimeError as exc:
                rec.observed(exc)
        for _ in range(4):
            _step(rec, opt)
        rec.at_exit()
        log = _process(events.events)
        assert log.background_error["fate"] == ("observed" if look else "unobserved")
        found = async_saves.unobserved_error(log, lambda p: os.path.basename(p))
        if look:
            assert found == []
        else:
            (finding,) = found
            assert finding.details["steps_after"] == 4 and finding.details["thread"] == "saver"
            assert "No space left on device" in finding.message and "last.pt" in finding.message


def test_a_save_on_the_training_thread_still_ends_at_its_next_step(tmp_path):
    events, rec, model, opt = _job()
    _step(rec, opt)
    _save(rec, model.state_dict(), str(tmp_path / "a.pt"))
    _step(rec, opt)
    kinds = events.kinds()
    assert kinds.index("save-end") < kinds.index("step", kinds.index("save-begin"))
    assert "thread" not in events.events[kinds.index("save-begin")]


def _event(kind, pid, ts, **fields):
    return {"v": protocol.SCHEMA_VERSION, "t": kind, "ts": ts, "pid": pid, **fields}


def test_the_checkpoint_process_saves_are_its_rank_s_at_the_steps_handed_over():
    """DCP's checkpoint process never steps: its k-th save is of the rank's k-th handoff, and its saves,
    operations and fault are the rank's; a process that saves and says nothing of a parent stays apart."""
    rank = [_event("hello", 10, 1.0, rank=0), _event("step", 10, 2.0, step=1, digest="d1"),
            _event("save-handoff", 10, 3.0, handoff=1, step=4, digest="d4", path="/c/step_4"),
            _event("save-handoff", 10, 5.0, handoff=2, step=8, digest="d8", path="/c/step_8")]
    helper = [_event("hello", 30, 1.5, rank=0, helper_of=10),
              _event("save-begin", 30, 3.5, save=1, step=0, path="/c/step_4", via="dcp", digest="x"),
              _event("op", 30, 3.6, op="open", path="/c/step_4/__0_0.distcp", n=1, save=1, ino=[1, 7], created=True,
                     trunc=True),
              _event("save-end", 30, 3.7, save=1, ok=True, bytes=9, writes=1),
              _event("save-begin", 30, 5.5, save=2, step=0, path="/c/step_8", via="dcp", digest="x"),
              _event("fault", 30, 5.6, fault="halt", save=2, write=3)]
    other = [_event("hello", 40, 1.0, rank=1),
             _event("save-begin", 40, 2.0, save=1, step=0, path="/d", via="dcp", digest="y")]
    log = RunLog.of([rank, helper, other])
    trainer = log.ranks()[0]
    assert [p.pid for p in log.processes] == [10, 40] and trainer.helpers == [30]
    assert [(s.step, s.digest, s.ok) for s in trainer.saves] == [(4, "d4", True), (8, "d8", None)]
    assert log.saver() is trainer and log.fault()["pid"] == 30
    assert [e["pid"] for e in log.save_ops()] == [30]
    assert log.ranks()[1].saves[0].step == 0


def test_a_save_its_thread_began_in_the_shutdown_after_the_exit_event_never_landed():
    """The process reported its exit while a daemon saver was still to begin its last save, which it then began
    during the interpreter's shutdown: that save never ended, so it never landed (unfinished, as the exit would have
    said); a begin repeated after the exit had already reported the save unfinished is the same checkpoint. A
    process killed inside a save (no exit event) keeps it interrupted."""
    saving = [_event("hello", 10, 1.0, rank=0), _event("step", 10, 2.0, step=6, digest="d6"),
              _event("save-begin", 10, 2.1, save=1, step=6, path="/c/last.pt.tmp", via="fileobj", digest="d6",
                     thread="saver"),
              _event("save-end", 10, 2.2, save=1, ok=True, bytes=9, writes=1)]
    late = [*saving, _event("exit", 10, 3.0, step=12),
            _event("save-begin", 10, 3.1, save=2, step=12, path="/c/last.pt.tmp", via="fileobj", digest="d12",
                   thread="saver")]
    (proc,) = RunLog.of([late]).processes
    assert [(s.index, s.ok, s.unfinished) for s in proc.saves] == [(1, True, False), (2, False, True)]
    repeated = [*saving, _event("save-begin", 10, 2.9, save=2, step=12, path=None, via="handoff", digest="d12"),
                _event("save-end", 10, 3.0, save=2, ok=False, bytes=0, writes=0, unfinished=True),
                _event("exit", 10, 3.0, step=12),
                _event("save-begin", 10, 3.1, save=2, step=12, path="/c/last.pt.tmp", via="fileobj", digest="x",
                       thread="saver")]
    (proc,) = RunLog.of([repeated]).processes
    assert [(s.index, s.ok, s.unfinished) for s in proc.saves] == [(1, True, False), (2, False, True)]
    (killed,) = RunLog.of([late[:-2] + late[-1:]]).processes
    assert [(s.index, s.ok) for s in killed.saves] == [(1, True), (2, None)]


def test_a_faulted_run_killed_only_in_its_shutdown_carried_on():
    """A job that caught the fault and ended its script carried on, whatever its interpreter's shutdown then did
    (``crash-at-exit``); one killed by a signal with no such finding did not."""
    from chaosckpt.conductor.results.result import Finding
    from chaosckpt.conductor.runs.launcher import RunResult
    from chaosckpt.conductor.runs.runlog import ProcessLog
    from chaosckpt.conductor.trial.faulted import Faulted

    def run(returncode, exit_crash=None):
        result = RunResult(spec=None, returncode=returncode, duration_s=1.0, timed_out=False, fault_fired=False,
                           survivors=[])
        return Faulted(result, RunLog([]), ProcessLog(pid=1), 12, {}, [], [], exit_crash)

    assert run(0).carried_on and not run(-6).carried_on
    assert run(-6, Finding("crash-at-exit", "killed in its shutdown")).carried_on


def test_what_a_failed_background_task_raised_for_the_full_disk_is_the_error_the_job_noticed(tmp_path):
    """DCP turns the ENOSPC of a shard write into a CheckpointException whose per-rank failures were pickled
    across ranks (no chain back to the OSError): the exception the task ended on is what its future raises, and
    that is the job noticing the full disk; another failure is not."""
    from torch.distributed.checkpoint.api import CheckpointException

    events, rec, model, opt = _job({"v": 1, "kind": "enospc", "save": 1, "at_write": 1})
    _step(rec, opt)
    raised = []

    def task():
        try:
            _save(rec, {"w": torch.zeros(8)}, str(tmp_path / "shard.distcp"))
        except OSError:
            raised.append(CheckpointException("save failed", {0: (RuntimeError("unexpected pos"), None)}))
            raise raised[0] from None

    thread = _background(rec, lambda: pytest.raises(CheckpointException, threads._carried, rec,
                                                      rec.handoff(task=True), task))
    thread.join()
    rec.observed(CheckpointException("save failed", {1: (RuntimeError("unexpected pos"), None)}))
    assert not [e for e in events.events if e["t"] == "background-error"]
    rec.observed(raised[0])
    (event,) = [e for e in events.events if e["t"] == "background-error"]
    assert event["fate"] == "observed" and "No space left on device" in event["error"]


def test_the_event_files_keep_a_background_save_s_thread_and_its_error_s_fate(tmp_path):
    """``save-thread`` names the saver of a checkpoint another thread serialized; ``background-error`` says the
    job saw the fault's error: both must survive the reader (the robust saver's re-raised full disk read as never
    noticed when they did not)."""
    events = [{"v": protocol.SCHEMA_VERSION, "t": kind, "ts": float(i), "pid": 7, **fields} for i, (kind, fields) in
              enumerate([("hello", {"rank": None}), ("save-begin", {"save": 1, "step": 6, "path": None, "via": "memory",
                                                                   "digest": "d"}),
                          ("save-thread", {"save": 1, "thread": "saver"}),
                          ("background-error", {"error": "OSError: full", "fate": "observed"})])]
    path = tmp_path / "events.x.7.jsonl"
    path.write_bytes(b"".join(protocol.encode(e) for e in events))
    log = _process(protocol.read_event_file(path))
    assert log.saves[0].thread == "saver" and log.background_error["fate"] == "observed"


def _writer_at_fault(rec, tmp_path, raised):
    """A background save whose first write the armed ENOSPC fails; what it raised goes to ``raised``."""
    def write():
        try:
            _save(rec, {"w": torch.zeros(64)}, str(tmp_path / "last.pt"))
        except OSError as exc:
            raised.append(exc)

    return _background(rec, write)


@pytest.mark.parametrize("writer_first", [True, False])
def test_a_background_fault_strikes_with_the_training_held_at_the_same_step_whoever_gets_there_first(tmp_path,
                                                                                                     writer_first):
    """``handed_step``: the writer waits at its place for the training thread, and the training thread waits at
    its next step for the fault, so the fault strikes at 0 steps in flight whether the writer reaches its byte
    before the training steps or long after (thread timing chose it before: any number of steps)."""
    events, rec, model, opt = _job({"v": 1, "kind": "enospc", "save": 1, "at_write": 1, "handed_step": 1})
    _step(rec, opt)
    raised = []
    if writer_first:
        thread = _writer_at_fault(rec, tmp_path, raised)
        time.sleep(0.3)
        assert not raised and "fault" not in events.kinds()  # at its place, waiting for the training
        _step(rec, opt)
    else:
        handoff = rec.handoff()
        trainer = threading.Thread(target=_step, args=(rec, opt))
        trainer.start()
        time.sleep(0.3)
        assert trainer.is_alive() and rec.step == 1  # held before its step, waiting for the fault
        thread = threading.Thread(target=threads._carried, name="saver", args=(rec, handoff, lambda: raised.append(
            pytest.raises(OSError, _save, rec, {"w": torch.zeros(64)}, str(tmp_path / "last.pt")))))
        thread.start()
        trainer.join(10)
    thread.join(10)
    (fault,) = [e for e in events.events if e["t"] == "fault"]
    assert (fault["steps_in_flight"], fault["training_step"], fault["held"]) == (0, 1, True)
    assert rec.step == 2  # released once the fault struck
    assert html._in_flight({**fault, "noticed": False}) == (", in its background thread saver, before the training "
                                                            "took another step, the training held there; the job "
                                                            "never noticed its error")


def test_a_save_handed_to_a_thread_that_never_began_writing_at_the_exit_never_landed(tmp_path):
    """A saver thread that waits for a slow store before writing: the thread of the last save, handed its
    snapshot at step 3, has written nothing when the process exits. Its function saved before, so it is a save
    in flight since its hand-over; a thread of another function still running is not."""
    events, rec, model, opt = _job()
    release = threading.Event()

    def saver(wait):
        if wait:
            release.wait(10)
        _save(rec, {"w": torch.zeros(2)}, str(tmp_path / "last.pt"))

    def started(fn, *args):
        handoff = rec.handoff(origin=f"job.{fn.__name__}", thread=fn.__name__)
        thread = threading.Thread(target=threads._carried, args=(rec, handoff, fn, *args))
        thread.start()
        return thread

    _step(rec, opt)
    started(saver, False).join()
    for _ in range(2):
        _step(rec, opt)
    waiting, other = started(saver, True), started(release.wait, 10)
    rec.at_exit()
    rec.disable()  # the process is gone: what the threads would have done after it goes unrecorded
    release.set()
    waiting.join()
    other.join()
    log = _process(events.events)
    assert [(s.step, s.ok, s.unfinished, s.waiting) for s in log.saves] == [(1, True, False, False),
                                                                            (3, False, True, True)]
    log.hello = {"cwd": str(tmp_path)}
    (finding,) = async_saves.unfinished_at_exit(log)
    assert finding.details == {"save": 2, "step": 3, "thread": "saver", "path": None, "begun": False}
    assert "handed to thread saver and not yet begun writing" in finding.message


def test_a_fault_in_a_save_the_reference_wrote_in_the_background_is_armed_with_its_hand_over_step():
    from chaosckpt.conductor.faults import arming
    from chaosckpt.conductor.faults.trigger import Trigger
    from chaosckpt.conductor.runs.runlog import Save

    def target(thread):
        return Save(index=2, step=16, path="/c/step_16", digest="d", ts=1.0, ok=True, bytes=1000, thread=thread)

    assert arming.in_save(Trigger(), target("AsyncCheckpointExecutor_0")) == {"at_byte": 500, "handed_step": 16}
    assert arming.in_save(Trigger(steps_in_flight=2), target("saver")) == {
        "at_byte": 500, "handed_step": 16, "steps_in_flight": 2}
    assert arming.in_save(Trigger(), target(None)) == {"at_byte": 500}
