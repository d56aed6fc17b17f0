"""The files of a fault: those the saves wrote, the names renames put in place, and those the fault event says the
process was still writing or copying into (a killed process sends no end event for them)."""

from __future__ import annotations

from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.fault_files import fault_paths


def test_the_files_a_killed_process_was_writing_and_the_renamed_names_are_files_of_the_fault():
    events = [
        {"t": "hello", "pid": 3, "ts": 0.0},
        {"t": "step", "pid": 3, "ts": 1.0, "step": 1},
        {"t": "save-begin", "pid": 3, "ts": 2.0, "save": 1, "step": 1, "path": "/w/ck/model.tmp", "digest": "d"},
        {"t": "save-file", "pid": 3, "ts": 2.1, "save": 1, "path": "/w/ck/model.tmp", "via": "path", "ok": True,
         "bytes": 10, "writes": 1},
        {"t": "save-move", "pid": 3, "ts": 2.2, "save": 1, "how": "rename", "src": "/w/ck/model.tmp",
         "dst": "/w/ck/model.pt", "ok": True, "copied": False, "over": False},
        {"t": "fault", "pid": 3, "ts": 2.5, "fault": "halt", "save": 1, "write": 4, "bytes": 30, "path": "/w/ck/opt.pt",
         "writing": ["/w/ck/opt.pt", "/w/ck/state.json"],
         "inside": {"how": "copy", "src": "/w/ck/model.pt", "dst": "/w/ck/best.pt"}},
    ]
    proc = RunLog.of([events]).processes[0]
    assert proc.paths() == ["/w/ck/model.tmp"]  # the save's own files: none of what the kill caught
    assert fault_paths(proc) == ["/w/ck/model.tmp", "/w/ck/model.pt", "/w/ck/opt.pt", "/w/ck/state.json",
                                 "/w/ck/best.pt"]
