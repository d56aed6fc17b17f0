"""Rebuilding a kill or a power loss inside a save from the journal of a shared run: which write it fires in,
what the disk holds, where its events end, and which trials may share (the end-to-end proof is
tests/test_e2e_shared.py)."""

from __future__ import annotations

import json
import os

import pytest

from chaosckpt.conductor import scenario
from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.runs import leftovers
from chaosckpt.conductor.runs.runlog import Save
from chaosckpt.conductor.trial import shared


def test_a_byte_fires_in_the_write_that_holds_it_and_a_write_number_starts_where_the_one_before_ended():
    ends = [10, 30, 60]
    assert shared._cut({"at_byte": 0}, ends, [60]) == (0, 1)
    assert shared._cut({"at_byte": 10}, ends, [60]) == (10, 2)
    assert shared._cut({"at_byte": 59}, ends, [60]) == (59, 3)
    assert shared._cut({"at_write": 1}, ends, [60]) == (0, 1)
    assert shared._cut({"at_write": 3}, ends, [60]) == (30, 3)


def test_a_byte_of_one_file_counts_from_that_files_start_and_one_past_its_end_never_fires():
    """The shared run wrote its save's first file in two writes (30 bytes) and its second in one (30): byte 5 of
    the second file is byte 35 of the save, in write 3; a byte past the second file's end, or a third file, is a
    place the agent never reaches in that run."""
    ends, sizes = [10, 30, 60], [30, 30]
    assert shared._cut({"file_index": 2, "at_byte": 5}, ends, sizes) == (35, 3)
    assert shared._cut({"file_index": 1, "at_byte": 29}, ends, sizes) == (29, 2)
    assert shared._cut({"file_index": 2, "at_byte": 30}, ends, sizes) is None
    assert shared._cut({"file_index": 3, "at_byte": 0}, ends, sizes) is None


def journal(root: str, header: int = 0):
    """A save of 200 bytes in two writes to ``tmp.pt``, renamed over ``last.pt``; with ``header``, the job
    opened the file and wrote that many bytes before the save began (a file object handed to torch.save)."""
    tmp, last = os.path.join(root, "tmp.pt"), os.path.join(root, "last.pt")
    ops = [{"n": 1, "op": "open", "path": tmp, "ino": [1, 7], "trunc": True, "created": True}]
    if header:
        ops.append({"n": 2, "op": "write", "path": tmp, "ino": [1, 7], "off": 0, "len": header})
    first = len(ops)
    ops += [
        {"n": first + 1, "op": "write", "path": tmp, "ino": [1, 7], "off": header, "len": 100},
        {"n": first + 2, "op": "write", "path": tmp, "ino": [1, 7], "off": header + 100, "len": 100},
        {"n": first + 3, "op": "rename", "src": tmp, "dst": last, "ino": [1, 7]},
    ]
    target = Save(index=2, step=20, path=tmp, digest="", ts=0.0, op=first if header else 0)
    return ops, target, tmp, last


@pytest.mark.parametrize("header", [0, 10])
def test_the_crash_state_holds_the_bytes_written_when_the_kill_came_under_the_name_they_had(tmp_path, header):
    root = str(tmp_path)
    ops, target, tmp, last = journal(root, header)
    initial = crash.Disk([root])

    entries, applied = shared._crash_state(initial, ops, target, 150)
    assert [(e.path, e.source, e.length) for e in entries] == [(tmp, last, header + 150)]
    assert applied == {op["n"] for op in ops[:-2]}

    entries, applied = shared._crash_state(initial, ops, target, 0)
    assert [(e.path, e.length) for e in entries] == [(tmp, header)]
    assert applied == ({1, 2} if header else {1})


def test_a_save_whose_file_the_journal_never_saw_written_is_not_rebuilt(tmp_path):
    ops, target, _, _ = journal(str(tmp_path))
    elsewhere = Save(index=2, step=20, path=str(tmp_path / "other.pt"), digest="", ts=0.0, op=0)
    assert shared._crash_state(crash.Disk([str(tmp_path)]), ops, elsewhere, 50) is None


@pytest.mark.parametrize("name, params, nproc, save", [
    ("kill9-mid-save", {"save": 2, "fraction": 0.3}, 1, 2),
    ("kill9-mid-save", {"save": 3, "write": 4}, 1, 3),
    ("kill9-mid-save", {"save": 2}, 2, None),
    ("kill9-mid-save", {"save": -1}, 1, None),
    ("kill9-mid-save", {"step": 300}, 1, None),
    ("enospc", {"save": 2}, 1, None),
    ("power-loss", {"save": 2}, 1, 2),
    ("power-loss", {"save": 3, "op": 2, "model": "strict"}, 1, 3),
    ("power-loss", {"save": 2, "node": 1}, 1, None),
    ("power-loss", {"save": 2}, 2, None),
    ("eval-left-on", {}, 1, None),
])
def test_only_single_process_kills_and_power_losses_at_a_numbered_save_share(name, params, nproc, save):
    assert shared.shareable(scenario.load(name, params), nproc) == save


def test_a_disk_read_back_from_json_replays_a_journal_as_the_one_scanned(tmp_path):
    root = tmp_path / "ckpt"
    (root / "old").mkdir(parents=True)
    (root / "old" / "last.pt").write_bytes(b"x" * 40)
    scanned = crash.Disk.scan([str(root)])
    ops, target, tmp, last = journal(str(root))
    back = crash.Disk.from_dict(json.loads(json.dumps(scanned.to_dict())))

    assert back.to_dict() == scanned.to_dict()
    rebuilt = shared._crash_state(back, ops, target, 120)[0]
    assert [e.key() for e in rebuilt] == [e.key() for e in shared._crash_state(scanned, ops, target, 120)[0]]
    assert {e.path: e.length for e in rebuilt} == {str(root / "old" / "last.pt"): 40, tmp: 120}


def test_a_power_loss_after_an_operation_keeps_the_events_up_to_it_and_fires_there():
    saver = [{"v": 1, "t": "hello", "ts": 0.0, "pid": 5},
             {"v": 1, "t": "save-begin", "ts": 1.0, "pid": 5, "save": 2, "op": 4},
             {"v": 1, "t": "op", "ts": 1.1, "pid": 5, "n": 5, "op": "open"},
             {"v": 1, "t": "op", "ts": 1.2, "pid": 5, "n": 6, "op": "write"},
             {"v": 1, "t": "save-end", "ts": 1.3, "pid": 5, "save": 2, "ok": True},
             {"v": 1, "t": "fault", "ts": 1.4, "pid": 5, "fault": "halt", "save": 2, "after_save": True}]
    helper = [{"v": 1, "t": "hello", "ts": 0.5, "pid": 6}, {"v": 1, "t": "hello", "ts": 1.25, "pid": 6}]

    cut = shared._cut_at_op([helper, saver], 2)
    assert cut[1] == saver[:4] + [{"v": 1, "t": "fault", "ts": 1.2, "pid": 5, "fault": "halt", "save": 2, "op": 6,
                                   "after": "write"}]
    assert cut[0] == helper[:1]
    assert shared._cut_at_op([helper, saver], 3) is None  # the shared run made no third operation in save 2


def test_a_journal_mapped_into_another_sandbox_names_its_files_there_with_the_same_data(tmp_path):
    ops, target, tmp, last = journal(str(tmp_path / "a"))
    disk = crash.Disk([str(tmp_path / "a")])
    for op in ops:
        disk.apply(op)

    def move(path):
        return path.replace(str(tmp_path / "a"), str(tmp_path / "b"), 1)

    moved = disk.relocated(move)
    assert moved.roots == [str(tmp_path / "b")] and set(moved.names) == {move(last)}
    assert [(e.path, e.source, e.length) for e in moved.after_crash("none")] == [(move(last), move(last), 200)]
    assert [e.key()[1:] for e in moved.after_crash("ordered")] == [e.key()[1:] for e in disk.after_crash("ordered")]
    for target, where in ((last, move(last)), ("last.pt", "last.pt")):  # an absolute link moves, a relative one stays
        disk.apply({"t": "op", "op": "symlink", "n": 99, "path": str(tmp_path / "a" / "link"), "ino": [1, 99],
                    "target": target})
        assert disk.relocated(move).inodes[(1, 99)].link == where


def test_a_killed_suites_shared_sandbox_is_removed_by_clean_with_the_trials_own_and_then_is_not_ready(tmp_path):
    suite = tmp_path / "results" / "20261202-050715-suite"
    prefix = suite / "prefixes" / "save-2"
    boxes = [prefix / "sandboxes" / "faulted", suite / "trials" / "t1" / "sandboxes" / "resume"]
    for box in boxes:
        box.mkdir(parents=True)
        (box / "last.pt").write_bytes(b"x" * 10)
    (prefix / shared.RECORD).write_text(json.dumps({"work": str(boxes[0])}))
    (suite / leftovers.LOCK).write_text("")  # its lock file is there and nobody holds it: the suite was killed
    assert shared.ready(prefix)

    [cleaned] = leftovers.sweep(tmp_path / "results")

    assert sorted(cleaned.sandboxes) == sorted(b.parent for b in boxes)
    assert not any(b.parent.exists() for b in boxes) and (prefix / shared.RECORD).is_file()
    assert not shared.ready(prefix)  # a resumed suite runs the shared faulted run again


def test_a_suite_groups_the_kills_power_losses_and_sweeps_of_one_save_and_replays_a_sweep_with_its_flag(tmp_path):
    from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial
    from chaosckpt.conductor.suite.plan_run import Suite

    trials = [PlannedTrial("kill", "kill9-mid-save", {"save": 2}), PlannedTrial("op", "power-loss", {"save": 2, "op": 3}),
              PlannedTrial("sweep", "power-loss", {"save": 2}, sweep=True), PlannedTrial("full", "enospc", {"save": 2}),
              PlannedTrial("alone", "power-loss", {"save": 3})]
    plan = Plan(args=["train.py"], command=["python", "train.py"], resume_command=["python", "train.py"], resume_option=[],
                workdir=str(tmp_path), results=str(tmp_path), timeout=3600.0, tolerance=0.0, nproc=1, seed=None,
                trials=trials, reference_key="k", created="2026-12-02T05:00:00+00:00")

    groups = Suite(tmp_path, plan).shared_groups(trials)

    assert {folder.name: [t.id for t in group] for folder, group in groups.items()} == {"save-2": ["kill", "op", "sweep"]}
    assert plan.replay(trials[2]) == f"cd {tmp_path} && chaosckpt run --scenario power-loss -p save=2 --sweep -- train.py"


def test_a_kill_in_a_save_written_on_a_background_thread_gets_a_faulted_run_of_its_own(tmp_path, monkeypatch):
    """The shared run's journal has the training thread's operations (a rotation) wherever thread timing put
    them against the background write; a run of its own holds the training at its step while the kill strikes."""
    from types import SimpleNamespace

    from chaosckpt.conductor.runs.runlog import ProcessLog

    (tmp_path / shared.RECORD).write_text(json.dumps({"save": 2, "run": {}, "work": str(tmp_path)}))
    (tmp_path / shared.DISK).write_text("{}")
    proc = ProcessLog(pid=1)
    proc.saves = [Save(index=2, step=16, path="/w/ckpt/step_16", digest="", ts=0.0, ends=[10, 20],
                       thread="AsyncCheckpointExecutor_0")]
    monkeypatch.setattr(shared, "_record", lambda stored: SimpleNamespace(events=str(tmp_path)))
    monkeypatch.setattr(shared.RunLog, "read", lambda path: SimpleNamespace(ops=lambda: []))
    monkeypatch.setattr(shared.compare, "fault_point", lambda log: (proc, 16))
    monkeypatch.setattr(shared.crash.Disk, "from_dict", lambda d: crash.Disk([str(tmp_path)]))
    monkeypatch.setattr(shared, "_crash_state", lambda *args: pytest.fail("rebuilt from the shared run"))
    ctx = SimpleNamespace(opts=SimpleNamespace(sweep=False), scenario=SimpleNamespace(
        kind=SimpleNamespace(needs_aftermath=False)))
    assert shared.rebuild(ctx, SimpleNamespace(fault={"at_byte": 5}), tmp_path) is None
