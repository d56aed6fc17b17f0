"""A checkpoint saved into memory, written to a temporary file and moved onto its place, as Lightning does it:
the agent records where it lands, the journal follows it there, a power loss takes it, and a move across file
systems that became a copy over the live file is named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from chaosckpt.conductor.disk import crash, cross_device
from chaosckpt.conductor.runs import confinement
from chaosckpt.conductor.runs.runlog import ProcessLog, Save, _process

JOB = textwrap.dedent(
    """
    import io, json, os, shutil, sys, tempfile
    import torch
    from chaosckpt.agent import fileops, interpose, moves
    from chaosckpt.agent.recorder import Recorder

    keep, layouts = sys.argv[1], json.loads(sys.argv[2])
    events = []

    class Events:
        def emit(self, kind, **fields):
            events.append({"t": kind, "ts": float(len(events)), "pid": 1, **fields})

    rec = Recorder(Events(), None, None)
    rec.hello()
    rec.journal = fileops.Journal(rec.emit, [tmp for _, tmp in layouts], keep)  # ckpt/ joins when a file moves in
    fileops.install(rec.journal)
    interpose.install(rec)
    moves.install(rec)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for ckpt, tmp in layouts:
        for _ in range(2):
            model(torch.ones(2)).sum().backward()
            opt.step()
            buffer = io.BytesIO()
            torch.save(model.state_dict(), buffer)  # Lightning's _atomic_save, then fsspec's commit
            fd, name = tempfile.mkstemp(dir=tmp)
            os.close(fd)
            with open(name, "wb") as f:
                f.write(buffer.getvalue())
            shutil.move(name, os.path.join(ckpt, "last.ckpt"))
    rec.at_exit()
    print(json.dumps(events))
    """
)


def log_workdir(log: ProcessLog) -> Path:
    return Path(log.hello["cwd"])


@dataclass
class Layout:
    """One checkpoint folder, the saves that moved a file into it, and what it holds after a power loss."""

    ckpt: Path
    saves: List[Save]
    lost: Dict[str, int]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Tuple[ProcessLog, Dict[str, Layout]]:
    """The job run once: a temporary folder on the checkpoint's file system, then (where there is one) on
    another, /dev/shm; one power loss at the end."""
    base = tmp_path_factory.mktemp("moves")
    shm = Path("/dev/shm")
    pairs = {"same": (base / "same" / "ckpt", base / "same" / "tmp")}
    if shm.is_dir() and os.stat(shm).st_dev != os.stat(base).st_dev:
        pairs["across"] = (base / "across" / "ckpt", shm / f"chaosckpt-test-{os.getpid()}")
    for ckpt, tmp in pairs.values():
        ckpt.mkdir(parents=True)
        tmp.mkdir(parents=True, exist_ok=True)
    disk = crash.Disk.scan([str(ckpt) for ckpt, _ in pairs.values()])
    try:
        proc = subprocess.run([sys.executable, "-c", JOB, str(base / "run" / "keep"),
                               json.dumps([[str(c), str(t)] for c, t in pairs.values()])],
                              capture_output=True, text=True, cwd=base)
    finally:
        if "across" in pairs:
            shutil.rmtree(pairs["across"][1])
    assert proc.returncode == 0, proc.stderr
    log = _process(json.loads(proc.stdout.splitlines()[-1]))
    for op in log.ops:
        disk.apply(op)
    entries = disk.after_crash("ordered")
    out = {}
    for key, (ckpt, _) in pairs.items():
        saves = [s for s in log.saves if all(m["dst"].startswith(str(ckpt)) for m in s.moves)]
        out[key] = Layout(ckpt, saves, {os.path.relpath(e.path, ckpt): e.length for e in entries
                                        if e.path.startswith(str(ckpt) + os.sep)})
    return log, out


def test_a_checkpoint_moved_in_from_a_temporary_file_is_found_journaled_and_lost_without_fsync(run):
    log, layouts = run
    same = layouts["same"]
    last = str(same.ckpt / "last.ckpt")
    assert [s.paths() for s in same.saves] == [[last], [last]]  # the file object's save lands in ckpt/
    assert [(m["how"], m["copied"], m["over"]) for s in same.saves for m in s.moves] == [("move", False, False)] * 2
    assert [o["dst"] for o in log.ops if o["op"] == "rename" and o["dst"] == last] == [last, last]  # journaled there
    assert same.lost == {"last.ckpt": 0}  # renamed over, never fsynced: empty
    assert os.path.getsize(last) > 0
    assert all(f.details["path"] != os.path.relpath(last, log.hello["cwd"]) for f in cross_device.became_copy(log, log_workdir(log)))


def test_a_move_across_file_systems_that_became_a_copy_over_the_live_checkpoint_is_named(run):
    log, layouts = run
    if "across" not in layouts:
        pytest.skip("needs /dev/shm on another file system than the test's folder")
    across = layouts["across"]
    last = str(across.ckpt / "last.ckpt")
    assert [(m["how"], m["copied"], m["over"]) for s in across.saves for m in s.moves] == [("move", True, False),
                                                                                         ("move", True, True)]
    opens = [o for o in log.ops if o["op"] == "open" and o["path"] == last]
    assert [o["trunc"] and not o["created"] for o in opens] == [False, True]  # the second copy truncates it in place
    assert across.lost == {"last.ckpt": 0}
    (finding,) = cross_device.became_copy(log, log_workdir(log))
    assert finding.kind == "move-became-copy" and finding.details["path"] == "across/ckpt/last.ckpt"
    assert finding.details["predicted"] is False
    assert finding.details["save"] == 4 and "EXDEV" in finding.message and "TMPDIR" in finding.message
    assert "os.replace() it over last.ckpt" in finding.message


def test_a_checkpoint_s_files_are_its_saves_then_what_moved_in_from_elsewhere():
    def move(src, dst, how="rename"):
        return {"how": how, "src": src, "dst": dst}

    atomic = Save(1, 4, "/w/ckpt/last.pt.tmp", "d", 0.0, moves=[move("/w/ckpt/last.pt.tmp", "/w/ckpt/last.pt"),
                                                                 move("/w/ckpt/last.pt", "/w/ckpt/best.pt", "copy")])
    assert atomic.paths() == ["/w/ckpt/last.pt.tmp"]  # its own file renamed, then copied: no new file of its own
    lightning = Save(1, 4, None, "d", 0.0, moves=[move("/tmp/x/tmpa", "/w/ckpt/epoch=0-step=4.ckpt", "move"),
                                                  move("/tmp/x/tmpb", "/w/ckpt/last.ckpt", "move")])
    assert lightning.paths() == ["/w/ckpt/epoch=0-step=4.ckpt", "/w/ckpt/last.ckpt"]
    dcp = Save(1, 4, "/w/ckpt/step_4", "d", 0.0, moves=[move("/w/ckpt/step_4/.metadata.tmp", "/w/ckpt/step_4/.metadata")])
    assert dcp.paths() == ["/w/ckpt/step_4"]  # DCP's .metadata is part of its folder


def test_a_move_in_from_the_job_s_tmpdir_is_foreseen_as_a_copy_when_the_user_s_tmpdir_is_another_file_system(
        tmp_path, monkeypatch):
    """A trial keeps $TMPDIR in the sandbox, where Lightning's move is a rename; the user's own may be a tmpfs."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's folder")
    box = tmp_path / "sandbox"
    saves = [Save(n, 4 * n, None, "d", float(n), moves=[
        {"how": "move", "src": f"{confinement.JOB_TMPDIR}/tmp{n}", "dst": str(box / "ckpt" / "last.ckpt"), "ok": True,
         "copied": False, "over": False}]) for n in (1, 2)]
    log = ProcessLog(pid=1, hello={"cwd": str(box)}, saves=saves)
    monkeypatch.setattr(tempfile, "tempdir", str(shm))
    (finding,) = cross_device.became_copy(log, tmp_path)
    assert finding.details == {"path": "ckpt/last.ckpt", "save": 2, "step": 8, "predicted": True}
    assert f"yours, {shm}, is on another file system" in finding.message
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cross_device.became_copy(log, tmp_path) == []  # the user's $TMPDIR beside the checkpoints: a rename
