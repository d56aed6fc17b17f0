"""The durability models on hand-written journals, over a fake filesystem."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.runs.runlog import Save
from chaosckpt.conductor.trial.aftermath import lost_checkpoint

ROOT = "/w/ckpt"


def ino(n):
    return [1, n]


def disk_with_old_checkpoint(fs):
    fs.create_file(f"{ROOT}/last.pt", contents=b"OLD-CHECKPOINT")
    disk = crash.Disk.scan([ROOT], keeps="/keep")
    old = disk.names[f"{ROOT}/last.pt"]
    return disk, old


def atomic_save(disk, fs, fsync=True, dirsync=True, keep="/keep/old"):
    fs.create_file(f"{ROOT}/last.pt.tmp", contents=b"NEW-CHECKPOINT-DATA")
    ops = [
        {"op": "open", "path": f"{ROOT}/last.pt.tmp", "ino": ino(99), "created": True, "trunc": True, "size": 0},
        {"op": "write", "ino": ino(99), "off": 0, "len": 10},
        {"op": "write", "ino": ino(99), "off": 10, "len": 9},
    ]
    if fsync:
        ops.append({"op": "fsync", "ino": ino(99), "size": 19})
    ops.append({"op": "rename", "src": f"{ROOT}/last.pt.tmp", "dst": f"{ROOT}/last.pt", "ino": ino(99),
                "replaced": list(disk.names[f"{ROOT}/last.pt"]), "keep": keep})
    if dirsync:
        ops.append({"op": "dirsync", "path": ROOT})
    # the disk when the job is killed: the rename happened, the agent kept the replaced inode
    fs.makedirs(os.path.dirname(keep), exist_ok=True)
    os.rename(f"{ROOT}/last.pt", keep)
    os.rename(f"{ROOT}/last.pt.tmp", f"{ROOT}/last.pt")
    for op in ops:
        disk.apply(op)
    return ops


def contents(entries):
    out = {}
    for e in entries:
        data = b""
        if e.length:
            with open(e.source, "rb") as f:
                data = f.read(e.length)
        out[os.path.basename(e.path)] = data
    return out


def test_scan_takes_what_is_on_disk_as_durable(fs):
    disk, old = disk_with_old_checkpoint(fs)
    for model in crash.MODELS:
        assert contents(disk.after_crash(model)) == {"last.pt": b"OLD-CHECKPOINT"}


def test_complete_atomic_save_survives_every_model(fs):
    disk, _ = disk_with_old_checkpoint(fs)
    atomic_save(disk, fs)
    for model in crash.MODELS:
        assert contents(disk.after_crash(model)) == {"last.pt": b"NEW-CHECKPOINT-DATA"}, model
    assert crash.missing_durability(disk, f"{ROOT}/last.pt", "strict") is None


def test_rename_without_fsync_comes_back_empty_under_ordered(fs):
    disk, _ = disk_with_old_checkpoint(fs)
    atomic_save(disk, fs, fsync=False)
    assert contents(disk.after_crash("none")) == {"last.pt": b"NEW-CHECKPOINT-DATA"}
    assert contents(disk.after_crash("ordered")) == {"last.pt": b""}
    assert crash.missing_durability(disk, f"{ROOT}/last.pt", "ordered") == "its data was not fsynced (0 of 19 bytes durable)"


def test_rename_without_directory_fsync_is_undone_under_strict(fs):
    disk, _ = disk_with_old_checkpoint(fs)
    atomic_save(disk, fs, dirsync=False)
    assert contents(disk.after_crash("ordered")) == {"last.pt": b"NEW-CHECKPOINT-DATA"}
    assert contents(disk.after_crash("strict")) == {"last.pt": b"OLD-CHECKPOINT"}
    why = crash.missing_durability(disk, f"{ROOT}/last.pt", "strict", name=lambda p: "ckpt")
    assert why == "its name was not made durable: no fsync of ckpt/ after it was created or renamed"


def test_crash_points_inside_a_save(fs):
    disk, _ = disk_with_old_checkpoint(fs)
    start = disk.fork()
    ops = atomic_save(disk, fs)
    seen = []
    for cut in range(len(ops) + 1):
        d = start.fork()
        for op in ops[:cut]:
            d.apply(op)
        seen.append(contents(d.after_crash("ordered", final=disk)))
    assert seen[0] == {"last.pt": b"OLD-CHECKPOINT"}
    assert seen[1] == seen[3] == {"last.pt": b"OLD-CHECKPOINT", "last.pt.tmp": b""}
    assert seen[4] == {"last.pt": b"OLD-CHECKPOINT", "last.pt.tmp": b"NEW-CHECKPOINT-DATA"}
    assert seen[5] == seen[6] == {"last.pt": b"NEW-CHECKPOINT-DATA"}


def test_truncation_after_fsync_keeps_the_durable_prefix(fs):
    fs.create_file(f"{ROOT}/run.pt", contents=b"new-bytes")
    fs.create_file("/keep/run.1", contents=b"DURABLE")
    disk = crash.Disk(roots=[ROOT], keeps="/keep")
    disk.apply({"op": "open", "path": f"{ROOT}/run.pt", "ino": ino(5), "created": True, "trunc": True, "size": 0})
    disk.apply({"op": "write", "ino": ino(5), "off": 0, "len": 7})
    disk.apply({"op": "fsync", "ino": ino(5), "size": 7})
    disk.apply({"op": "open", "path": f"{ROOT}/run.pt", "ino": ino(5), "created": False, "trunc": True, "size": 0,
                "keep": "/keep/run.1"})
    disk.apply({"op": "write", "ino": ino(5), "off": 0, "len": 9})
    assert contents(disk.after_crash("ordered")) == {"run.pt": b"DURABLE"}
    assert contents(disk.after_crash("none")) == {"run.pt": b"new-bytes"}


def test_unlink_survives_only_a_directory_fsync_under_strict(fs):
    fs.create_file("/keep/gone", contents=b"OLD")
    fs.create_dir(ROOT)
    disk = crash.Disk.scan([ROOT], keeps="/keep")
    disk.apply({"op": "open", "path": f"{ROOT}/a.pt", "ino": ino(7), "created": True, "trunc": True, "size": 0})
    disk.apply({"op": "write", "ino": ino(7), "off": 0, "len": 3})
    disk.apply({"op": "fsync", "ino": ino(7), "size": 3})
    disk.apply({"op": "dirsync", "path": ROOT})
    disk.apply({"op": "unlink", "path": f"{ROOT}/a.pt", "ino": ino(7), "keep": "/keep/gone"})
    assert contents(disk.after_crash("ordered")) == {}
    assert contents(disk.after_crash("strict")) == {"a.pt": b"OLD"}
    disk.apply({"op": "dirsync", "path": ROOT})
    assert contents(disk.after_crash("strict")) == {}


def test_materialize_rewrites_the_roots(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "last.pt").write_bytes(b"whole file")
    (root / "stray.tmp").write_bytes(b"x")
    entries = [crash.Entry(f"{root}/last.pt", f"{root}/last.pt", 5), crash.Entry(f"{root}/sub/empty.pt", None, 0)]
    crash.materialize(entries, [str(root)], tmp_path)
    assert sorted(os.listdir(root)) == ["last.pt", "sub"]
    assert (root / "last.pt").read_bytes() == b"whole"
    assert (root / "sub" / "empty.pt").read_bytes() == b""


@pytest.mark.parametrize("model", crash.MODELS)
def test_paths_outside_the_roots_are_not_materialized(fs, model):
    fs.create_dir(ROOT)
    disk = crash.Disk.scan([ROOT])
    disk.apply({"op": "open", "path": "/tmp/x", "ino": ino(8), "created": True, "trunc": True, "size": 0})
    assert disk.after_crash(model) == []


def test_materialize_makes_no_folder_the_crashed_run_never_made(tmp_path):
    """A checkpoint location the reference saved into but the faulted run never reached stays absent."""
    model = tmp_path / "out" / "checkpoint-4" / "model.pt"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")
    entries = [crash.Entry(str(model), str(model), 7)]
    crash.materialize(entries, [str(tmp_path / "out"), str(tmp_path / "out/checkpoint-8"), str(tmp_path / "late")],
                      tmp_path)
    assert os.listdir(tmp_path / "out") == ["checkpoint-4"]
    assert not (tmp_path / "late").exists()
    assert model.read_bytes() == b"weights"


def test_a_symbolic_link_is_a_name_that_survives_as_names_do_and_is_rebuilt_as_a_link(tmp_path):
    """Lightning's save_last="link": last.ckpt links to a checkpoint that was never fsynced."""
    ROOT = str(tmp_path / "ckpt")
    os.mkdir(ROOT)
    with open(f"{ROOT}/epoch=1.ckpt", "wb") as f:
        f.write(b"CHECKPOINT")
    os.symlink("epoch=1.ckpt", f"{ROOT}/last.ckpt")
    disk = crash.Disk.scan([ROOT])
    assert disk.inodes[disk.names[f"{ROOT}/last.ckpt"]].link == "epoch=1.ckpt"  # the scan sees a link, not its file
    disk.apply({"op": "unlink", "path": f"{ROOT}/last.ckpt", "ino": list(disk.names[f"{ROOT}/last.ckpt"])})
    with open(f"{ROOT}/epoch=2.ckpt", "wb") as f:
        f.write(b"NEWER")
    for op in ({"op": "open", "path": f"{ROOT}/epoch=2.ckpt", "ino": ino(7), "created": True, "trunc": True, "size": 0},
               {"op": "write", "ino": ino(7), "off": 0, "len": 5},
               {"op": "symlink", "path": f"{ROOT}/last.ckpt", "target": "epoch=2.ckpt", "ino": ino(8)}):
        disk.apply(op)
    links = {model: {os.path.basename(e.path): e.link for e in disk.after_crash(model)} for model in crash.MODELS}
    assert links["ordered"]["last.ckpt"] == links["none"]["last.ckpt"] == "epoch=2.ckpt"
    assert links["strict"]["last.ckpt"] == "epoch=1.ckpt"  # no fsync of the folder made the new link durable
    why = crash.missing_durability(disk, f"{ROOT}/last.ckpt", "ordered", os.path.basename)
    assert why == "it links to epoch=2.ckpt, and its data was not fsynced (0 of 5 bytes durable)"
    crash.materialize(disk.after_crash("ordered"), [ROOT], tmp_path)
    assert os.readlink(f"{ROOT}/last.ckpt") == "epoch=2.ckpt" and os.path.getsize(f"{ROOT}/epoch=2.ckpt") == 0
    assert crash.Disk.from_dict(disk.to_dict()).inodes[(1, 8)].link == "epoch=2.ckpt"


def test_strict_names_every_sync_a_checkpoint_lacked(fs):
    """Issue 19: a job that never fsyncs lacked the data's fsync, its folder's after the rename, and the parent's
    of the folder it made; all three are named, not only the first."""
    fs.create_dir(ROOT)
    disk = crash.Disk.scan([ROOT])
    new = f"{ROOT}/step-2"
    fs.create_file(f"{new}/model.pt", contents=b"WEIGHTS")
    for op in ({"op": "mkdir", "path": new},
               {"op": "open", "path": f"{new}/model.pt.tmp", "ino": ino(9), "created": True, "trunc": True, "size": 0},
               {"op": "write", "ino": ino(9), "off": 0, "len": 7},
               {"op": "rename", "src": f"{new}/model.pt.tmp", "dst": f"{new}/model.pt", "ino": ino(9)}):
        disk.apply(op)
    name = lambda p: os.path.relpath(p, "/w")  # noqa: E731
    assert crash.missing_durability(disk, f"{new}/model.pt", "strict", name) == (
        "its data was not fsynced (0 of 7 bytes durable); "
        "its name was not made durable: no fsync of ckpt/step-2/ after it was created or renamed; "
        "the folder ckpt/step-2/ it is in was made, but no fsync of ckpt/ followed")
    assert crash.missing_durability(disk, f"{new}/model.pt", "ordered", name) == (
        "its data was not fsynced (0 of 7 bytes durable)")  # names survive in order: only the data is lost
    for op in ({"op": "fsync", "ino": ino(9), "size": 7}, {"op": "dirsync", "path": new}):
        disk.apply(op)
    assert crash.missing_durability(disk, f"{new}/model.pt", "strict", name) == (
        "the folder ckpt/step-2/ it is in was made, but no fsync of ckpt/ followed")
    disk.apply({"op": "dirsync", "path": ROOT})
    assert crash.missing_durability(disk, f"{new}/model.pt", "strict", name) is None
    assert [os.path.basename(e.path) for e in disk.after_crash("strict")] == ["model.pt"]


def _lost(disk, ops, model):
    """``aftermath.lost_checkpoint`` for the checkpoint ``atomic_save`` wrote (saved to last.pt.tmp, renamed)."""
    save = Save(index=2, step=16, path=f"{ROOT}/last.pt.tmp", digest="d", ts=0.0)
    ctx = SimpleNamespace(scenario=SimpleNamespace(trigger=SimpleNamespace(model=model)))
    armed = SimpleNamespace(disk=disk, work=Path("/w"))
    return lost_checkpoint(ctx, save, [{**op, "ts": 1.0} for op in ops], armed, "ckpt/last.pt")


def test_a_checkpoint_the_crash_model_keeps_whole_is_not_called_lost(fs):
    # the resume may still go wrong (it loaded an EMA module into the model): that is no lost checkpoint
    disk, _ = disk_with_old_checkpoint(fs)
    ops = atomic_save(disk, fs)
    assert _lost(disk, ops, "strict") is None and _lost(disk, ops, "ordered") is None


def test_a_checkpoint_that_lacked_its_fsync_is_called_lost_with_the_fsync_it_lacked(fs):
    disk, _ = disk_with_old_checkpoint(fs)
    ops = atomic_save(disk, fs, fsync=False)
    lost = _lost(disk, ops, "ordered")
    assert lost.kind == "acknowledged-checkpoint-lost" and lost.details["path"] == "ckpt/last.pt"
    assert lost.details["missing"] == "its data was not fsynced (0 of 19 bytes durable)"
