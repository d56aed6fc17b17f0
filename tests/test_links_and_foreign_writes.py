"""Issue 19 items 4 and 5 on hand-written journals and in a child process with the journal installed: a hard link is
a second name for the same bytes (both rebuilt, torn together); positional and vectored writes and opens through a
folder's descriptor are journaled where they land; another process's writes are no crash points of the save, and
the sweep's rows hold the checkpoint's files alone, even when its folder is the working directory."""

from __future__ import annotations

import os

from chaosckpt.conductor.disk import crash, sweep
from chaosckpt.conductor.runs.runlog import RunLog
from tests.test_fileops import run_with_journal

ROOT = "/w"
NEW = [1, 99]


def saved_and_linked(fs, fsync_size):
    """``last.pt.tmp`` written (19 bytes, fsynced up to ``fsync_size``), renamed to ``last.pt`` and hard-linked to
    ``best.pt``; the job's script sits in the same folder."""
    fs.create_file(f"{ROOT}/train.py", contents=b"print('train')")
    disk = crash.Disk.scan([ROOT])
    fs.create_file(f"{ROOT}/last.pt", contents=b"NEW-CHECKPOINT-DATA")
    os.link(f"{ROOT}/last.pt", f"{ROOT}/best.pt")
    ops = [{"op": "open", "path": f"{ROOT}/last.pt.tmp", "ino": NEW, "created": True, "trunc": True, "size": 0},
           {"op": "write", "path": f"{ROOT}/last.pt.tmp", "ino": NEW, "off": 0, "len": 19},
           {"op": "fsync", "ino": NEW, "size": fsync_size},
           {"op": "rename", "src": f"{ROOT}/last.pt.tmp", "dst": f"{ROOT}/last.pt", "ino": NEW},
           {"op": "link", "src": f"{ROOT}/last.pt", "path": f"{ROOT}/best.pt", "ino": NEW}]
    for n, op in enumerate(ops, 1):
        op.update(n=n, pid=10, ts=float(n), save=1)
    return disk, ops


def test_a_hard_link_is_rebuilt_under_both_names_with_the_same_bytes(fs):
    disk, ops = saved_and_linked(fs, fsync_size=19)
    for op in ops:
        disk.apply(op)
    for model in crash.MODELS[:2]:
        entries = {e.path: e for e in disk.after_crash(model)}
        assert entries[f"{ROOT}/best.pt"].length == entries[f"{ROOT}/last.pt"].length == 19, model
        assert entries[f"{ROOT}/best.pt"].source == f"{ROOT}/last.pt"


def test_a_torn_original_means_a_torn_link(fs):
    disk, ops = saved_and_linked(fs, fsync_size=7)
    for op in ops:
        disk.apply(op)
    entries = {e.path: e.length for e in disk.after_crash("ordered")}
    assert entries[f"{ROOT}/last.pt"] == entries[f"{ROOT}/best.pt"] == 7
    assert "no fsync of" in crash.missing_durability(disk, f"{ROOT}/best.pt", "strict")


def test_the_sweep_s_crash_points_are_the_save_s_and_its_rows_the_checkpoint_s_files(fs):
    disk, ops = saved_and_linked(fs, fsync_size=19)
    fs.create_file(f"{ROOT}/data.bin", contents=b"D" * 8)  # a data-preparation step, another process
    prep = [{"op": "open", "path": f"{ROOT}/data.bin", "ino": [1, 50], "created": True, "trunc": True, "size": 0,
             "pid": 20, "n": n, "ts": 0.5 + n / 100} for n in (1, 2, 3)]
    mine = {f"{ROOT}/{name}" for name in ("last.pt.tmp", "last.pt", "best.pt")}
    sw = sweep.explore(disk, sorted(prep[:0] + ops, key=lambda o: o["ts"]), lambda op: op["pid"] == 10, "none",
                       lambda p: os.path.relpath(p, ROOT), mine.__contains__)
    assert [p.op for p in sw.points] == [0, 1, 2, 3, 4, 5]
    assert [p.operation for p in sw.points][-1] == "link last.pt -> best.pt"
    rows = [sorted(f["path"] for f in p.files) for p in sw.points]
    assert rows[0] == [] and rows[1] == ["last.pt.tmp"] and rows[-1] == ["best.pt", "last.pt"]
    state = {e.path for e in sw.states[sw.points[-1].state]}  # the resume's sandbox still holds the script and data
    assert {f"{ROOT}/train.py", f"{ROOT}/data.bin"} <= state
    with_prep = sweep.explore(disk, sorted(prep + ops, key=lambda o: o["ts"]), lambda op: op["pid"] == 10, "none",
                              lambda p: p, mine.__contains__)
    assert [p.op for p in with_prep.points] == [0, 1, 2, 3, 4, 5]  # the prep's three ops are no crash points


def test_the_checkpoint_s_files_are_those_the_saving_process_wrote_or_named():
    events = [{"t": "hello", "pid": 10, "ts": 0.0, "rank": None},
              {"t": "step", "pid": 10, "ts": 1.0, "step": 1},
              {"t": "save-begin", "pid": 10, "ts": 2.0, "save": 1, "step": 1, "path": "/w/last.pt.tmp",
               "digest": "d", "via": "fileobj"},
              {"t": "op", "pid": 10, "ts": 2.1, "n": 1, "op": "link", "src": "/w/last.pt", "path": "/w/best.pt",
               "ino": NEW, "save": 1},
              {"t": "op", "pid": 10, "ts": 2.2, "n": 2, "op": "dirsync", "path": "/w", "save": 1},
              {"t": "op", "pid": 10, "ts": 3.0, "n": 3, "op": "open", "path": "/w/train.log", "ino": [1, 7],
               "created": True, "trunc": True, "size": 0}]
    prep = [{"t": "hello", "pid": 20, "ts": 0.0, "rank": None},
            {"t": "op", "pid": 20, "ts": 0.5, "n": 1, "op": "open", "path": "/w/data.bin", "ino": [1, 50],
             "created": True, "trunc": True, "size": 0, "save": 1}]
    log = RunLog.of([events, prep])
    mine = log.checkpoint_files()
    assert mine("/w/last.pt.tmp") and mine("/w/best.pt")
    assert not mine("/w/train.py") and not mine("/w/data.bin") and not mine("/w/train.log")
    assert [op["pid"] for op in log.save_ops()] == [10, 10, 10]


def test_pwrite_writev_dir_fd_and_link_are_journaled_where_they_land(tmp_path):
    result = run_with_journal(tmp_path, """
        dfd = os.open("ckpt", os.O_RDONLY | os.O_DIRECTORY)
        fd = os.open("a.pt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, dir_fd=dfd)
        os.writev(fd, [b"ab", b"cd"])
        os.pwrite(fd, b"XY", 10)
        os.pwritev(fd, [b"1", b"23"], 20)
        os.fsync(fd)
        os.close(fd)
        os.link("a.pt", "b.pt", src_dir_fd=dfd, dst_dir_fd=dfd)
        out["same"] = os.stat("ckpt/a.pt").st_ino == os.stat("ckpt/b.pt").st_ino
        out["size"] = os.path.getsize("ckpt/b.pt")
    """)
    ckpt = str(tmp_path / "ckpt")
    ops = [(op["op"], op.get("path"), op.get("off"), op.get("len")) for op in result["ops"] if op["op"] != "mkdir"]
    assert ops[0] == ("open", f"{ckpt}/a.pt", None, None)
    assert ops[1:4] == [("write", f"{ckpt}/a.pt", 0, 4), ("write", f"{ckpt}/a.pt", 10, 2),
                        ("write", f"{ckpt}/a.pt", 20, 3)]
    link = result["ops"][-1]
    assert (link["op"], link["src"], link["path"]) == ("link", f"{ckpt}/a.pt", f"{ckpt}/b.pt")
    assert link["ino"] == result["ops"][1]["ino"] and result["out"] == {"same": True, "size": 23}
    fsync = next(op for op in result["ops"] if op["op"] == "fsync")
    assert fsync["size"] == 23


def test_a_hard_link_the_power_loss_took_is_named_as_the_same_file_never_a_copy_to_fsync(fs):
    from chaosckpt.conductor.disk import copies
    from chaosckpt.conductor.runs.runlog import Save

    disk, ops = saved_and_linked(fs, fsync_size=19)  # data fsynced, no folder fsync after the rename or the link
    for op in ops:
        disk.apply(op)
    save = Save(index=1, step=16, path=f"{ROOT}/last.pt.tmp", digest="d", ts=0.5)
    [lost] = copies.lost(save, ops, disk, "strict", lambda p: os.path.relpath(p, "/"))
    assert lost.kind == "acknowledged-checkpoint-lost"
    assert lost.details == {"path": "w/best.pt", "link_of": "w/last.pt", "step": 16, "model": "strict",
                            "missing": "its name was not made durable: no fsync of w/ after it was created or renamed"}
    assert lost.message == (
        "w/best.pt, a hard link to the checkpoint of step 16 (w/last.pt) made after the save, did not survive the "
        "power loss under the strict model: its name was not made durable: no fsync of w/ after it was created or "
        "renamed; a hard link is the same file under another name, not a copy, so there is no copy to fsync: fsync "
        "w/last.pt before os.link() and its folder w/ after it, before the job moves on")
