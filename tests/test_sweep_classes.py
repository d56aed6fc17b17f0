"""The sweep's classes of crash state: states a restarted job cannot tell apart are resumed once, and a class
no resume tried keeps the sweep from passing (issue 19: a sweep passed on a state it never resumed)."""

from __future__ import annotations

import os
from pathlib import Path

from chaosckpt.conductor.disk import crash, sweep
from chaosckpt.conductor.results.result import Finding, Trial
from chaosckpt.conductor.results.stored import StoredTrial
from chaosckpt.conductor.trial import verdict

ROOT = "/w/ckpt"
NEW = [1, 99]


def unlink_then_rename(fs):
    """The save of tests/jobs/sweep_unlink_job.py: tmp.pt written and fsynced in chunks, last.pt unlinked, then
    tmp.pt renamed over it."""
    fs.create_file(f"{ROOT}/last.pt", contents=b"OLD-CHECKPOINT")
    disk = crash.Disk.scan([ROOT], keeps="/keep")
    old = list(disk.names[f"{ROOT}/last.pt"])
    fs.create_file("/keep/old", contents=b"OLD-CHECKPOINT")
    fs.create_file(f"{ROOT}/tmp.pt", contents=b"NEW-CHECKPOINT-DATA")
    ops = [{"op": "open", "path": f"{ROOT}/tmp.pt", "ino": NEW, "created": True, "trunc": True, "size": 0}]
    for off, length in ((0, 10), (10, 5), (15, 4)):
        ops += [{"op": "write", "ino": NEW, "off": off, "len": length}, {"op": "fsync", "ino": NEW, "size": off + length}]
    ops += [{"op": "unlink", "path": f"{ROOT}/last.pt", "ino": old, "keep": "/keep/old"},
            {"op": "rename", "src": f"{ROOT}/tmp.pt", "dst": f"{ROOT}/last.pt", "ino": NEW}]
    for n, op in enumerate(ops, 1):
        op["n"] = n
    os.rename(f"{ROOT}/tmp.pt", f"{ROOT}/last.pt.new")  # where the data is at the end of the journal
    return disk, ops


def load_checks(sw):
    """What the load check says of each state's files: the old checkpoint is step 4, the whole new one step 8,
    and a partial tmp.pt does not load."""
    results = []
    for entries in sw.states:
        checked = {}
        for e in entries:
            whole = e.length == 19 or (e.path.endswith("last.pt") and e.ino != (1, 99))
            step = 8 if e.ino == (1, 99) else 4
            checked[e.path] = {"ok": whole, "error": "" if whole else "truncated", "note": "",
                               "progress": {"step": step} if whole else {}}
        results.append(checked)
    return results


def test_states_a_restarted_job_cannot_tell_apart_form_one_class(fs):
    disk, ops = unlink_then_rename(fs)
    sw = sweep.explore(disk, ops, lambda op: op["n"] >= 1, "ordered", lambda p: os.path.relpath(p, "/w"))
    sweep.classify(sw, load_checks(sw))
    seen = [(p.operation, p.state, p.state_class) for p in sw.points]
    # two partial tmp.pt files (10 and 15 bytes durable) are different states but one class: neither loads
    assert [s for _, s, _ in seen] == [0, 1, 1, 2, 2, 3, 3, 4, 5, 6]
    assert [c for _, _, c in seen] == [0, 1, 1, 2, 2, 2, 2, 3, 4, 5]
    assert sw.representatives == [0, 1, 2, 4, 5, 6]
    assert seen[8] == ("unlink ckpt/last.pt", 5, 4)  # only tmp.pt: a class of its own, the one issue 19 missed


def test_a_file_no_load_check_judges_is_told_apart_by_whether_it_is_whole(fs):
    entry = crash.Entry(f"{ROOT}/latest", f"{ROOT}/latest", 3, (1, 5), 0)
    assert sweep.seen(entry, None, whole=True) != sweep.seen(entry, None, whole=False)
    assert sweep.seen(crash.Entry(f"{ROOT}/latest", None, 0, (1, 5)), None, whole=False) == (f"{ROOT}/latest", "empty")
    loads = {"ok": True, "progress": {"step": 8}}
    assert sweep.seen(entry, loads, True) == sweep.seen(crash.Entry(f"{ROOT}/latest", None, 9, (1, 6)), loads, True)


def test_a_class_no_resume_tried_is_named_in_the_table_and_never_passes(fs):
    disk, ops = unlink_then_rename(fs)
    sw = sweep.explore(disk, ops, lambda op: op["n"] >= 1, "ordered", lambda p: os.path.relpath(p, "/w"))
    sweep.classify(sw, load_checks(sw))
    for point in sw.points:  # a cap of 1: only the first class resumed
        if point.state == sw.representatives[0]:
            point.outcome, point.resumed = "last-good (step 4)", True
    assert sweep.untried(sw.points) == [1, 2, 3, 4, 5]
    lines = sweep.table(sw.points)
    assert lines[0].endswith("| class 0, resumed: last-good (step 4)")
    assert lines[8].endswith("| ckpt/tmp.pt 19 B | class 4, not resumed")
    untried = Finding("sweep-untried", "5 of 6 classes of crash state were never resumed")
    assert verdict.status(True, verdict.settle([Finding("sweep", "s"), untried], [], None)) == "inconclusive"
    assert verdict.unsettled([untried]) is untried and verdict.UNSETTLING["sweep-untried"] == "sweep-untried"
    record = [p.to_dict() for p in sw.points]
    assert (record[8]["state_class"], record[8]["resumed"], record[0]["resumed"]) == (4, False, True)
    trial = Trial(scenario="power-loss", status="inconclusive", headline="h", sweep=record)
    stored = StoredTrial("power-loss", "power-loss", Path("/w"), trial)
    rows = stored.crash_points()
    assert [r["outcome"] for r in rows[:3]] == ["class 0: last-good (step 4)", "class 1: not resumed",
                                                "class 1: not resumed"]
    assert stored.sweep_resumes() == ("1 disk state resumed: last-good (step 4) in 1, 5 of 6 classes of crash "
                                      "state never resumed")
