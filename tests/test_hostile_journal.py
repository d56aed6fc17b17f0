"""A job that forges its own durability journal (issue 32, item 2): chaosckpt rebuilds the disk after a power loss
as the host's root, so every path of the journal is resolved beneath the sandbox without following a link, every
field is checked before it is trusted, and the operations refused make the trial inconclusive, named one by one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import project_with, run_chaosckpt

from chaosckpt.conductor.disk import beneath, crash, journal
from chaosckpt.conductor.runs.runlog import RunLog

HOSTILE = Path(__file__).resolve().parent / "hostile" / "forged_journal_job.py"
OPENERS = [pytest.param(beneath.walk, id="walk")]
if beneath.open_beneath is beneath.openat2:
    OPENERS.insert(0, pytest.param(beneath.openat2, id="openat2"))
WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


@pytest.fixture
def box(tmp_path):
    """A folder (``inside``, holding ``d/`` and links out of it) beside a file it must never reach (``outside``)."""
    (tmp_path / "outside").write_bytes(b"HOST FILE")
    inside = tmp_path / "inside"
    (inside / "d").mkdir(parents=True)
    os.symlink(tmp_path / "outside", inside / "file-link")
    os.symlink(tmp_path, inside / "dir-link")
    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)
    assert (tmp_path / "outside").read_bytes() == b"HOST FILE"


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize("path", ["d/../../outside", "d/../d/new", "/etc/hostname", "file-link", "dir-link/outside",
                                  "dir-link/made"])
def test_a_path_that_climbs_is_absolute_or_goes_through_a_link_is_refused(box, opener, path):
    """``..`` (even one that stays inside), an absolute path, a link at the last component or on the way."""
    root, fd = box
    with pytest.raises(beneath.Escape):
        os.close(opener(fd, path, WRITE))
    assert not (root / "made").exists()


@pytest.mark.parametrize("opener", OPENERS)
def test_a_path_through_proc_is_refused(opener, tmp_path):
    """``/proc/self`` is a link, ``/proc/<pid>/root`` and ``cwd`` magic ones: none leads anywhere."""
    (tmp_path / "victim").write_bytes(b"KEEP")
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for path in (f"self/root{tmp_path}/victim", f"{os.getpid()}/root{tmp_path}/victim", f"{os.getpid()}/cwd"):
            with pytest.raises(beneath.Escape):
                os.close(opener(proc, path, os.O_RDONLY))
        os.close(opener(proc, f"{os.getpid()}/status", os.O_RDONLY))  # no link on the way: opened
    finally:
        os.close(proc)
    assert (tmp_path / "victim").read_bytes() == b"KEEP"


@pytest.mark.parametrize("opener", OPENERS)
def test_a_plain_path_beneath_opens_and_folders_are_made_one_by_one(box, opener, monkeypatch):
    root, fd = box
    os.close(opener(fd, "d/new.pt", WRITE))
    assert (root / "inside" / "d" / "new.pt").is_file()
    monkeypatch.setattr(beneath, "open_beneath", opener)
    os.close(beneath.folder(fd, "d/e/f", make=True))
    assert (root / "inside" / "d" / "e" / "f").is_dir()
    with pytest.raises(beneath.Escape):
        beneath.folder(fd, "dir-link/made", make=True)
    assert not (root / "made").exists()


def op(n, kind, **fields):
    return {"v": 1, "t": "op", "ts": 1.0 + n, "pid": 7, "n": n, "op": kind, **fields}


def test_malformed_op_events_are_dropped_and_named_not_a_crash(tmp_path):
    """Fields of the wrong type or size, a path that is relative, climbs or is not plain: each dropped with why,
    the rest kept in order (a ``ts`` that is a string once made the sort raise)."""
    good = op(1, "open", path="/w/ckpt/a.pt", ino=[1, 2], created=True, trunc=True, size=0, keep=None)
    bad = [op(2, "write", ino=[1, 2], off=2**80, len=1), op(3, "fsync", ino=[1, 2], size="huge"),
           op(4, "open", path="ckpt/a.pt", ino=[1, 2], created=True, trunc=True),
           op(5, "open", path="/w/ckpt/../../etc/x", ino=[1, 2], created=True, trunc=True),
           op(6, "open", path="/w/ckpt/./a.pt", ino=[1, 2], created=True, trunc=True),
           op(7, "write", ino=["a", 2], off=0, len=1), op(8, "symlink", path="/w/ckpt/l", ino=[1, 3]),
           {**op(9, "write", ino=[1, 2], off=0, len=1), "ts": "soon"}, op(10, "chmod", path="/w/ckpt/a.pt"),
           {**op(11, "rename", src="/w/a", dst="/w/b"), "n": True}]
    (tmp_path / "events.x.7.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [good, *bad]))
    log = RunLog.read(tmp_path)
    assert log.ops() == [good]
    whys = [r.why for r in log.dropped_ops()]
    assert whys == [
        "its off is not a number of bytes from 0 to 9223372036854775807",
        "its size is not a number of bytes from 0 to 9223372036854775807",
        "its path is not an absolute path",
        "its path climbs with .., which the agent never writes and chaosckpt never follows",
        "its path is not in its plain form (a . or a doubled /), which the agent never writes",
        "its ino is not a device and inode number",
        "it has no target",
        "its number, process or time is missing or not a number",
        "it names no operation the journal records",
        "its number, process or time is missing or not a number",
    ]
    assert log.dropped_ops()[8].describe(str) == "op 10: it names no operation the journal records"
    [found] = journal.finding(log.dropped_ops(), lambda p: p)
    assert found.kind == "journal-refused" and len(found.details["refused"]) == 10
    assert found.message.startswith("10 operations were refused and the disk rebuilt without them: op 2 (write): ")
    assert "{" not in found.message and "Refusal(" not in found.message


def test_the_disk_refuses_a_name_inside_a_link_a_link_over_files_and_a_foreign_keep(tmp_path):
    root = str(tmp_path / "ckpt")
    disk = crash.Disk([root], keeps=str(tmp_path / "events" / "keep"))
    assert disk.apply(op(1, "symlink", path=f"{root}/evil", target="/project", ino=[1, 1]))
    assert not disk.apply(op(2, "open", path=f"{root}/evil/victim.txt", ino=[1, 2], created=False, trunc=True))
    assert not disk.apply(op(3, "mkdir", path=f"{root}/evil/sub"))
    assert disk.apply(op(4, "open", path=f"{root}/d/a.pt", ino=[1, 4], created=True, trunc=True))
    assert not disk.apply(op(5, "symlink", path=f"{root}/d", target="/project", ino=[1, 5]))
    assert not disk.apply(op(6, "rename", src=f"{root}/evil", dst=f"{root}/d", ino=[1, 1]))
    assert not disk.apply(op(7, "unlink", path=f"{root}/d/a.pt", ino=[1, 4], keep="/etc/shadow"))
    assert disk.apply(op(8, "unlink", path=f"{root}/d/a.pt", ino=[1, 4], keep=f"{tmp_path}/events/keep/1.4.1"))
    assert not disk.apply(op(9, "symlink", path=root, target="/project", ino=[1, 9]))
    assert disk.apply(op(10, "mkdir", path=root))
    assert [(r.n, r.path) for r in disk.refused] == [
        (2, f"{root}/evil/victim.txt"), (3, f"{root}/evil/sub"), (5, f"{root}/d"), (6, f"{root}/d"), (7, "/etc/shadow"),
        (9, root)]
    assert disk.refused[0].reason(lambda p: os.path.relpath(p, tmp_path)) == (
        "it is inside ckpt/evil, a symbolic link: a rebuild would write where the link leads")
    assert sorted(e.path for e in disk.after_crash("none")) == [f"{root}/evil"]


@pytest.mark.parametrize("opener", OPENERS)
def test_materialize_never_writes_through_a_link(tmp_path, opener, monkeypatch):
    """With either resolution: an entry beneath a link entry is an ``Escape``, and a checkpoint folder the job
    replaced by a link to the project is rebuilt as a folder, the project untouched."""
    monkeypatch.setattr(beneath, "open_beneath", opener)
    project, work = tmp_path / "project", tmp_path / "work"
    project.mkdir()
    (project / "victim.txt").write_bytes(b"KEEP ME")
    work.mkdir()
    root = str(work / "ckpt")
    entries = [crash.Entry(f"{root}/evil", None, 0, link=str(project)), crash.Entry(f"{root}/evil/victim.txt", None, 0)]
    with pytest.raises(beneath.Escape):
        crash.materialize(entries, [root], work)
    os.unlink(f"{root}/evil")
    os.rmdir(root)
    os.symlink(project, root, target_is_directory=True)
    crash.materialize([crash.Entry(f"{root}/victim.txt", None, 0)], [root], work)
    assert not os.path.islink(root) and os.listdir(root) == ["victim.txt"]
    assert (project / "victim.txt").read_bytes() == b"KEEP ME"
    with pytest.raises(beneath.Escape):  # a target outside the folder it writes beneath
        crash.materialize([], [str(project)], work)
    assert (project / "victim.txt").read_bytes() == b"KEEP ME"


def test_materialize_reads_no_more_than_the_file_holds_and_only_beneath_the_roots_and_keeps(tmp_path):
    """A forged size of 2**62 bytes copies the 5 the kept file holds; a source elsewhere gives nothing."""
    work, keeps = tmp_path / "work", tmp_path / "events" / "keep"
    (work / "ckpt").mkdir(parents=True)
    keeps.mkdir(parents=True)
    (keeps / "1.2.1").write_bytes(b"whole")
    (tmp_path / "secret").write_bytes(b"HOST SECRET")
    root = str(work / "ckpt")
    entries = [crash.Entry(f"{root}/a.pt", str(keeps / "1.2.1"), 2**62), crash.Entry(f"{root}/b.pt", str(tmp_path / "secret"), 11)]
    crash.materialize(entries, [root], work, keeps=str(keeps))
    assert (work / "ckpt" / "a.pt").read_bytes() == b"whole" and (work / "ckpt" / "b.pt").read_bytes() == b""


# --- the hostile job through the real command line ---------------------------------------------------------------

@pytest.fixture
def hostile(tmp_path):
    """The forging job's project, holding ``victim.txt``, and a file of the host outside it; both must come out
    byte-for-byte as they went in."""
    project = project_with(tmp_path, HOSTILE)
    (project / "victim.txt").write_bytes(b"the project's own file\n")
    host = tmp_path / "host-file.txt"
    host.write_bytes(b"a file of the host\n")
    yield project, host
    assert host.read_bytes() == b"a file of the host\n"
    assert (project / "victim.txt").read_bytes() == b"the project's own file\n"


@pytest.mark.e2e
@pytest.mark.parametrize("sweep", [[], ["--sweep", "--max-resumes", "1"]], ids=["power-loss", "sweep"])
def test_a_forged_journal_writes_nothing_outside_and_the_trial_cannot_pass(tmp_path, hostile, sweep):
    """A sweep rebuilds every crash state (in a scratch folder) from the same journal; one resume is enough here:
    the refusal, not a class left untried, is the reason given."""
    project, host = hostile
    res = run_chaosckpt(["run", "train.py", "-s", "power-loss", *sweep, "--json", "--out", str(tmp_path / "r"), "--",
                         "--host-file", str(host), "--project", str(project)], cwd=project)
    assert res.returncode == 4, res.stdout + res.stderr
    trial = res.trial
    assert (trial["status"], trial["reason"]) == ("inconclusive", "journal-refused"), trial["headline"]
    [found] = [f for f in trial["findings"] if f["kind"] == "journal-refused"]
    refused = {r["op"]: r for r in found["refused"]}
    assert sorted(refused) == list(range(1000001, 1000004)) + [1000005, 1000006, 1000007]
    assert refused[1000001]["path"].startswith("ckpt/../../") and refused[1000001]["path"].endswith(str(host))
    assert refused[1000005] == {"op": 1000005, "operation": "open", "path": "ckpt/evil/victim.txt",
                                "why": "it is inside ckpt/evil, a symbolic link: a rebuild would write where the link leads"}
    assert "op 1000005 (open ckpt/evil/victim.txt)" in trial["headline"]
    assert "Traceback" not in res.stderr


@pytest.mark.e2e
def test_a_suite_rebuilding_power_losses_from_one_shared_run_refuses_the_forged_journal_too(tmp_path, hostile):
    """Two power losses of save 2 share one journaled faulted run: each trial maps its journal into its own sandbox
    and rebuilds from it, and each refuses the same forged operations."""
    project, host = hostile
    (project / "chaosckpt.toml").write_text(
        f'command = "train.py --host-file {host} --project {project}"\n'
        '[[scenarios]]\nscenario = "power-loss"\nid = "returned"\nparams = { save = 2 }\n'
        '[[scenarios]]\nscenario = "power-loss"\nid = "strict"\nparams = { save = 2, model = "strict" }\n')
    res = run_chaosckpt(["suite"], cwd=project)
    assert res.returncode == 4, res.stdout + res.stderr
    [folder] = (project / "chaosckpt-results").glob("*-suite*")
    trials = json.loads((folder / "result.json").read_text())["trials"]
    assert [(t["status"], t["reason"], "shared" in t["fault"]) for t in trials] == [
        ("inconclusive", "journal-refused", True)] * 2
    for trial in trials:
        [found] = [f for f in trial["findings"] if f["kind"] == "journal-refused"]
        assert {r["op"]: r["path"] for r in found["refused"]}[1000005] == "ckpt/evil/victim.txt"
