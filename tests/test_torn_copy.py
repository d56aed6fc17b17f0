"""The torn-copy finding built from a faulted run's events and the files' states: the copy the fault caught the job
in, repaired by a later save of the resumed run or not, and copies that are whole or that the resume read."""

from __future__ import annotations

from pathlib import Path

from chaosckpt import protocol
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial import torn_copy

WORK = Path("/sandbox/faulted")
LAST, BEST, TMP = (str(WORK / "ckpt" / name) for name in ("last.pt", "best.pt", "last.pt.tmp"))


def _save(index, step, ts, copied=True):
    events = [{"t": "save-begin", "pid": 7, "ts": ts, "save": index, "step": step, "path": TMP, "digest": "d"},
              {"t": "save-move", "pid": 7, "ts": ts, "save": index, "how": "rename", "src": TMP, "dst": LAST,
               "ok": True, "copied": False, "over": False}]
    if copied:
        events.append({"t": "save-move", "pid": 7, "ts": ts, "save": index, "how": "copy", "src": LAST, "dst": BEST,
                       "ok": True, "copied": True, "over": True})
    return events + [{"t": "save-end", "pid": 7, "ts": ts, "save": index, "ok": True, "bytes": 100, "writes": 2}]


def _steps(n):
    return [{"t": "step", "pid": 7, "ts": float(i), "step": i} for i in range(1, n + 1)]


def faulted(inside=True):
    """Save 1 complete with its copy; the fault in save 2, inside the copy of last.pt over best.pt."""
    fault = {"t": "fault", "pid": 7, "ts": 20.0, "fault": "halt", "save": 2, "path": BEST, "write": 3, "bytes": 150,
             **({"inside": {"how": "copy", "src": LAST, "dst": BEST}} if inside else {})}
    events = [{"t": "hello", "pid": 7, "ts": 0.0}, *_steps(8), *_save(1, 8, 9.0),
              {"t": "save-begin", "pid": 7, "ts": 19.0, "save": 2, "step": 16, "path": TMP, "digest": "e"}, fault]
    return RunLog.of([events]).processes[0]


def resumed(saves_copy):
    """The resume: loads last.pt, takes 8 steps, then saves (copying best.pt again, or not)."""
    events = [{"t": "hello", "pid": 9, "ts": 0.0},
              {"t": "load", "pid": 9, "ts": 0.5, "path": LAST, "ok": True, "error": None},
              *_steps(8), *_save(1, 8, 9.0, copied=saves_copy)]
    return RunLog.of([events])


def fault_record(best):
    return {"kind": "halt", "save": 2, "file_states": {
        "ckpt/last.pt": {"bytes": 100, "full_bytes": 100, "loads": True},
        "ckpt/best.pt": best}}


TORN = {"bytes": 40, "full_bytes": 100, "loads": False}


def test_a_copy_torn_by_the_fault_and_rewritten_by_the_resumed_run_is_named_repaired():
    (found,) = torn_copy.torn_copies(fault_record(TORN), faulted(), resumed(True), WORK, None, 16)
    assert found.kind == "torn-copy" and found.severity == protocol.SEVERITY["torn-copy"] == "warning"
    assert found.details["path"] == "ckpt/best.pt" and found.details["copy_of"] == "ckpt/last.pt"
    assert found.details["repaired_step"] == 24  # the resume started at step 16 and saved after 8 steps
    assert "40 of its 100 bytes, and it does not load" in found.message
    assert "The resume loaded ckpt/last.pt, not it, so the resume was unaffected" in found.message
    assert "the resumed run's save at step 24 wrote it whole again" in found.message
    assert "os.replace() it over ckpt/best.pt" in found.message and "None" not in found.message


def test_a_torn_copy_nothing_rewrote_says_what_reads_it_takes_a_torn_file():
    (found,) = torn_copy.torn_copies(fault_record(TORN), faulted(), resumed(False), WORK, None, 16)
    assert found.details["repaired_step"] is None
    assert "nothing rewrote it before the run ended" in found.message and "wrote it whole again" not in found.message


def test_the_copy_the_kill_struck_is_known_from_the_fault_event_alone():
    """The first checkpoint's copy struck: no save-move of it was ever sent, the fault event names it."""
    events = [{"t": "hello", "pid": 7, "ts": 0.0}, *_steps(8),
              {"t": "save-begin", "pid": 7, "ts": 9.0, "save": 1, "step": 8, "path": TMP, "digest": "d"},
              {"t": "fault", "pid": 7, "ts": 9.5, "fault": "halt", "save": 1, "path": BEST, "write": 3, "bytes": 150,
               "inside": {"how": "copy", "src": LAST, "dst": BEST}}]
    proc = RunLog.of([events]).processes[0]
    assert torn_copy.copies_struck(proc, WORK) == [("ckpt/best.pt", "ckpt/last.pt")]
    assert torn_copy.copies_struck(faulted(inside=False), WORK) == [("ckpt/best.pt", "ckpt/last.pt")]


def test_a_whole_copy_a_missing_one_or_one_the_resume_read_is_no_torn_copy():
    whole = {"bytes": 100, "full_bytes": 100, "loads": True}
    assert torn_copy.torn_copies(fault_record(whole), faulted(), resumed(True), WORK, None, 16) == []
    missing = {"bytes": None, "full_bytes": 100, "loads": None}
    assert torn_copy.torn_copies(fault_record(missing), faulted(), resumed(True), WORK, None, 16) == []
    # the resume tripped over it: that is a torn checkpoint, not a copy nobody reads
    assert torn_copy.torn_copies(fault_record(TORN), faulted(), resumed(True), WORK, "ckpt/best.pt", None) == []
    # a copy of the full size that does not load is torn too
    unloadable = {"bytes": 100, "full_bytes": 100, "loads": False}
    assert len(torn_copy.torn_copies(fault_record(unloadable), faulted(), resumed(True), WORK, None, 16)) == 1
