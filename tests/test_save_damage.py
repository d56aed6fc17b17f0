"""What an interrupted save did to the file the resume tripped over (chaosckpt/conductor/trial/faulted.py
``save_damage``): a torn file, and an in-place save that destroyed the checkpoint before it, whichever fault
struck it."""

from __future__ import annotations

from types import SimpleNamespace

from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.faulted import Faulted, save_damage


def _membuf_events(work, fault):
    """membuf_job's events: torch.save into a BytesIO, then Path.write_bytes over ckpt/last.pt, twice; ``fault``
    strikes the second save (the full disk fails its one write: no bytes, ok false)."""
    last = str(work / "ckpt" / "last.pt")

    def save(index, ts, ok):
        return [
            {"t": "save-begin", "pid": 2, "ts": ts, "save": index, "step": 8 * index, "path": None, "via": "memory",
             "digest": f"d{index}"},
            {"t": "save-file", "pid": 2, "ts": ts + 0.1, "save": index, "path": last, "via": "write", "ok": ok,
             "bytes": 54597 if ok else 0, "writes": 1 if ok else 0, "memory": True, "whole": True,
             "error": None if ok else "No space left on device"},
            {"t": "save-end", "pid": 2, "ts": ts + 0.2, "save": index, "ok": ok, "bytes": 54597 if ok else 0,
             "writes": 1 if ok else 0},
        ]

    events = [{"t": "hello", "pid": 2, "ts": 0.0}, *save(1, 1.0, True),
              {"t": "save-begin", "pid": 2, "ts": 2.0, "save": 2, "step": 16, "path": None, "via": "memory",
               "digest": "d2"},
              {"t": "fault", "pid": 2, "ts": 2.0, "save": 2, **fault}, *save(2, 2.0, False)[1:]]
    return RunLog.of([events]).processes[0]


def _damage(tmp_path, fault):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "last.pt").write_bytes(b"")  # as the full disk left it
    proc = _membuf_events(tmp_path, fault)
    completed = proc.completed_saves(before=proc.fault["ts"])
    run = Faulted(None, RunLog.of([]), proc, 16, {"files": {"ckpt/last.pt": 0}}, completed)
    armed = Armed({}, tmp_path, [str(tmp_path / "ckpt")], None, 54597, {"ckpt/last.pt": 54597})
    ctx = SimpleNamespace(host_path=lambda path, work: path)
    return {f.kind: f for f in save_damage(ctx, run, armed, "crashed", "ckpt/last.pt")}


def test_a_disk_full_from_the_save_s_start_names_the_in_place_save_it_struck(tmp_path):
    found = _damage(tmp_path, {"fault": "disk-full", "free_bytes": 0})
    assert set(found) == {"torn-checkpoint", "in-place-save"}
    assert found["in-place-save"].details == {"path": "ckpt/last.pt", "overwritten_step": 8}
    assert found["in-place-save"].message.startswith(
        "save 2 wrote straight over ckpt/last.pt, which held the checkpoint of step 8")
    assert found["torn-checkpoint"].message == "the interrupted save 2 left ckpt/last.pt with 0 of its 54597 bytes"


def test_an_enospc_placed_at_a_write_names_the_same(tmp_path):
    last = str(tmp_path / "ckpt" / "last.pt")
    found = _damage(tmp_path, {"fault": "enospc", "write": 1, "bytes": 0, "path": last})
    assert set(found) == {"torn-checkpoint", "in-place-save"}
