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


def test_a_torn_dcp_shard_is_judged_by_its_bytes_never_by_loading_it(tmp_path):
    # cut, a shard can still read as a checkpoint (its first tensor's record whole); whole, it reads as a damaged
    # zip (measured: 3,794 of 7,588 bytes "loaded", all 7,588 did not): nothing loads a shard alone
    import warnings
    from types import SimpleNamespace

    import torch
    import torch.distributed.checkpoint as dcp

    from chaosckpt.conductor.trial.fault_files import file_states

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no process group: a single-process save, as DCP warns
        dcp.save({"model": torch.nn.Linear(8, 32).state_dict()}, checkpoint_id=str(tmp_path / "ckpt" / "step_8"))
    shard = tmp_path / "ckpt" / "step_8" / "__0_0.distcp"
    full = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:full // 2])
    events = [{"t": "hello", "pid": 3, "ts": 0.0},
              {"t": "save-begin", "pid": 3, "ts": 1.0, "save": 1, "step": 8, "path": None, "digest": "d"},
              {"t": "fault", "pid": 3, "ts": 1.5, "fault": "halt", "save": 1, "write": 3, "path": str(shard)}]
    proc = RunLog.of([events]).processes[0]
    ctx = SimpleNamespace(host_path=lambda path, work: path)
    states = file_states(ctx, proc, tmp_path, {"ckpt/step_8/__0_0.distcp": full})
    assert states == {"ckpt/step_8/__0_0.distcp": {"bytes": full // 2, "full_bytes": full, "loads": None}}
