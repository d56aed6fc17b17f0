"""A property of a suite's shared faulted run: every crash state a trial rebuilds from it, in its own copy of the
shared run's sandbox, holds the same files with the same bytes as the trial's own faulted run would have left.

Saves are generated at random from the operations checkpoint writers make (new files, writes over a file in place,
fsyncs, renames over an old name, unlinks, folder fsyncs, a file a native writer makes unseen), run for real under
the agent's journal, then rebuilt both ways: in the faulted run's own sandbox and in a copy of it, as a suite's
trial gets it (``shared.journal_in``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from chaosckpt.conductor.disk import crash, sweep
from chaosckpt.conductor.runs import sandbox
from chaosckpt.conductor.trial import shared

SAVES = 30
NAMES = ("last.pt", "last.pt.tmp", "best.pt", "sub/shard.bin")


def program(rng: random.Random) -> List[list]:
    """A save of 3 to 9 operations on a few names, each an action the child below knows."""
    steps = []
    for _ in range(rng.randint(3, 9)):
        kind = rng.choice(["write", "write", "overwrite", "fsync", "rename", "unlink", "dirsync", "native"])
        steps.append([kind, rng.choice(NAMES), rng.choice(NAMES), rng.randint(1, 3000)])
    return steps


CHILD = textwrap.dedent("""
    import json, os, subprocess, sys
    from chaosckpt.agent import fileops

    def fsync_path(path, flags=os.O_RDONLY):
        fd = os.open(path, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def act(kind, name, other, size):
        os.makedirs("ckpt/sub", exist_ok=True)
        path, dest = os.path.join("ckpt", name), os.path.join("ckpt", other)
        data = bytes((size + i) % 251 for i in range(size))
        if kind in ("write", "overwrite") and (kind == "write") != os.path.exists(path):
            with open(path, "ab" if kind == "write" else "wb") as f:
                f.write(data[: size // 2])
                f.write(data[size // 2:])
        elif kind == "fsync" and os.path.exists(path):
            fsync_path(path, os.O_WRONLY)
        elif kind == "rename" and os.path.exists(path) and path != dest:
            os.replace(path, dest)
        elif kind == "unlink" and os.path.exists(path):
            os.unlink(path)
        elif kind == "dirsync":
            fsync_path(os.path.dirname(path))
        elif kind == "native":
            subprocess.run(["sh", "-c", f"head -c {size} /dev/zero > ckpt/native.bin"], check=True)

    out = []
    for folder, steps in json.load(sys.stdin):
        os.chdir(folder)
        ops = []
        journal = fileops.Journal(lambda kind, **f: ops.append({"t": kind, "pid": 1, **f}),
                                  [os.path.join(folder, "ckpt")], os.path.join(os.path.dirname(folder), "run", "keep"))
        fileops.install(journal)
        for step in steps:
            act(*step)
        fileops.patches.uninstall("journal")
        out.append(ops)
    print(json.dumps(out))
""")


def tree(root: Path) -> Dict[str, object]:
    """What a folder holds: each file's bytes and each link's target, by path relative to it."""
    found: Dict[str, object] = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_file():
                found[rel] = path.read_bytes()
    return found


def state(entries: List[crash.Entry], disk: crash.Disk, box: Path, scratch: Path) -> Dict[str, object]:
    """A crash state's files as a resume in ``box`` finds them (materialized under ``scratch``)."""
    scratch.mkdir(parents=True)
    crash.materialize(entries, disk.roots, scratch, lambda p: str(scratch / os.path.relpath(p, box)), disk.keeps)
    return tree(scratch)


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> List[tuple]:
    """The generated saves, each run under the journal in a sandbox of its own: (sandbox, initial disk, ops)."""
    base = tmp_path_factory.mktemp("saves")
    rng = random.Random(29)
    made, jobs = [], []
    for index in range(SAVES):
        box = base / str(index) / "sandbox"
        (box / "ckpt" / "sub").mkdir(parents=True)
        for name in rng.sample(NAMES, rng.randint(0, 2)):  # what earlier saves left, durable
            (box / "ckpt" / name).write_bytes(bytes([index]) * rng.randint(1, 500))
        initial = crash.Disk.scan([str(box / "ckpt")])
        initial.keeps = str(box.parent / "run" / "keep")
        made.append((box, crash.Disk.from_dict(json.loads(json.dumps(initial.to_dict())))))  # as a suite stores it
        jobs.append([str(box), program(rng)])
    proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(jobs), capture_output=True, text=True,
                          check=True)
    return [(box, initial, ops) for (box, initial), ops in zip(made, json.loads(proc.stdout))]


@pytest.mark.parametrize("model", crash.MODELS)
def test_every_crash_state_of_a_save_rebuilt_in_a_copy_of_the_shared_sandbox_is_the_one_the_trial_would_get(
        saves, model, tmp_path):
    compared = 0
    for index, (box, initial, ops) in enumerate(saves):
        copy = sandbox.create(box, tmp_path / str(index) / "trial")
        moved = shared._mover(box, copy)
        disk, end, native = shared.journal_in(initial, ops, moved)
        mine = sweep.explore(initial, ops, lambda op: True, model, str)
        theirs = sweep.explore(disk, [shared._moved_event(op, moved) for op in ops], lambda op: True, model, str,
                               final=end, native=native)
        assert len(mine.points) == len(theirs.points) == len(ops) + 1
        for point, (a, b) in enumerate(zip(mine.points, theirs.points)):
            here = tmp_path / str(index) / f"{model}-{point}"
            alone = state(mine.states[a.state], initial, box, here / "alone")
            rebuilt = state(theirs.states[b.state], disk, copy, here / "shared")
            assert rebuilt == alone, f"save {index}, crash point {point} ({a.operation}), {model} model"
            compared += 1
    assert compared > SAVES * 4


def test_a_power_loss_rebuilt_in_a_copy_of_the_shared_sandbox_leaves_the_files_the_trial_s_own_would(saves, tmp_path):
    changed = 0
    for index, (box, initial, ops) in enumerate(saves):
        model = crash.MODELS[index % len(crash.MODELS)]
        copy = sandbox.create(box, tmp_path / str(index) / "trial")
        disk, end, native = shared.journal_in(initial, ops, shared._mover(box, copy))
        crash.power_cut(disk, [shared._moved_event(op, shared._mover(box, copy)) for op in ops], model, disk.roots,
                        copy, end, native)
        own = sandbox.create(box, tmp_path / str(index) / "own-before")  # the own rebuild rewrites ``box``
        crash.power_cut(initial.fork(), ops, model, initial.roots, box)
        assert tree(copy) == tree(box), f"save {index}, {model} model"
        changed += tree(own) != tree(box)
    assert changed > SAVES / 4  # the power losses took something: there was something to get wrong
