"""The job generator: dimensions of how real trainers save, rotate, resume and draw data, a seeded pairwise covering
array over them, and the standalone job script one row of it composes.

Every job trains a small model (8 -> 16 -> 1, with a dropout layer when it draws) for ``STEPS`` steps of ``BATCH``
rows, ``EPOCH`` steps an epoch, SGD with momentum and a cosine LR schedule, and prints ``step N loss X batch B`` (the
loss's ``repr``: bitwise; B the sum of the batch's inputs, which names the batch) each step, ``saved step S`` once a save (and its rotation) returned, and ``resumed from step S`` when
it loads a checkpoint (S: the step the checkpoint was written at, kept in it as ``saved_at`` whatever else it holds).
It resumes by itself: the same command, run again, looks for a checkpoint.

This module imports nothing from chaosckpt (tests/test_generated_jobs.py checks it): the judge reads it.
"""

from __future__ import annotations

import itertools
import random
from typing import Dict, List, Sequence, Tuple

STEPS, BATCH, EPOCH = 32, 8, 8
"""32 steps, 8 rows a batch, 8 batches (64 rows) an epoch: 4 epochs."""

DIMENSIONS: Dict[str, Tuple[str, ...]] = {
    # how a save is written
    "writer": ("inplace", "tmp_rename", "tmp_fsync_rename", "tmp_fsync_rename_dirfsync", "bytesio_write_bytes",
               "unlink_rename"),
    # overwrite one name (ckpt/last.pt); else step-named files ckpt/step_NNNNNN.pt: keep the newest 2 (deleted after
    # the save), delete every older one before the save, or after it
    "rotation": ("overwrite", "keep2", "delete_before", "delete_after"),
    # who writes it: the training thread; a saver thread given a copy of the state and joined before the next save
    # and at the end; a daemon saver thread never joined (the interpreter may exit while it writes)
    "saver": ("sync", "thread_joined", "daemon"),
    # what the resume takes: ckpt/last.pt; the newest file by name; the newest file that loads (older on failure);
    # the newest file whose completion marker (``<file>.done``, written after the file) is there
    "resume": ("fixed", "newest_by_name", "newest_loads", "newest_marker"),
    # what the checkpoint holds besides the model: everything (optimizer, scheduler, step); no optimizer; no
    # scheduler; the count of finished epochs only (a resume starts that epoch's first step)
    "saved": ("full", "no_optimizer", "no_scheduler", "epoch_only"),
    # which random streams the checkpoint holds: none, torch's, torch's and Python's
    "rng": ("none", "torch", "all"),
    # where batches come from: a shuffled DataLoader on the global RNG; the same with 2 worker processes; a shuffled
    # DataLoader with its own generator seeded per epoch; an iterable dataset streaming a permutation seeded per
    # epoch; a slice of a tensor by step; a row counter that starts at 0 in every process
    "data": ("loader_global", "workers", "loader_gen", "iterable", "slice", "counter"),
    # what the training step draws: nothing; torch's RNG (dropout); Python's random (input noise)
    "draws": ("none", "dropout", "python"),
    # how often a save is made: every epoch (8 steps), or every 6 steps (mid-epoch)
    "every": ("8", "6"),
    # the resume validates after its load (eval()); then calls train() again, or forgets to; or (train() called)
    # loads the model's weights from the checkpoint's EMA copy; or takes a zero-gradient optimizer step before the
    # load (to create the optimizer's state), which the load then overwrites
    "quirk": ("train_after_val", "no_train_after_val", "ema_weights", "step_before_load"),
}


def valid(row: Dict[str, str]) -> bool:
    """The constraints between dimensions. A fixed-name resume needs the one fixed name (rotation overwrite); the
    step-named rotations have no fixed name to take. A saver thread writes step-named files: strace counts a write
    in each thread apart (``inject=...:when=N`` fires at the N-th write of whichever thread gets there first), and
    each save's thread writes a name every save writes in the same number of writes, so the judge could strike only
    the first save's. A partial row is checked on the dimensions it has."""
    if row.get("resume") == "fixed" and row.get("rotation", "overwrite") != "overwrite":
        return False
    threaded = row.get("saver", "sync") != "sync"
    return not (threaded and (row.get("rotation") == "overwrite" or row.get("resume") == "fixed"))


def valid_pairs() -> List[Tuple[Tuple[str, str], Tuple[str, str]]]:
    """Every pair of values of two dimensions that a job may hold together."""
    names = list(DIMENSIONS)
    pairs = []
    for a, b in itertools.combinations(names, 2):
        for va in DIMENSIONS[a]:
            for vb in DIMENSIONS[b]:
                if valid({a: va, b: vb}):
                    pairs.append(((a, va), (b, vb)))
    return pairs


def covered(rows: Sequence[Dict[str, str]]) -> set:
    """The pairs of values the rows hold."""
    out = set()
    for row in rows:
        for a, b in itertools.combinations(list(DIMENSIONS), 2):
            out.add(((a, row[a]), (b, row[b])))
    return out


def covering_array(seed: int = 0, candidates: int = 30) -> List[Dict[str, str]]:
    """A seeded pairwise covering array (AETG-style greedy): each row starts from a pair not yet covered and fills the
    other dimensions, in a random order, with the value that covers the most new pairs (ties by the seeded RNG); the
    best of ``candidates`` such rows is kept, until every valid pair is covered. Every row satisfies ``valid``."""
    rng = random.Random(seed)
    names = list(DIMENSIONS)
    todo = set(valid_pairs())
    rows: List[Dict[str, str]] = []
    while todo:
        best, best_gain = None, -1
        ordered = sorted(todo)
        for _ in range(candidates):
            (a, va), (b, vb) = rng.choice(ordered)
            row = {a: va, b: vb}
            rest = [n for n in names if n not in row]
            rng.shuffle(rest)
            for name in rest:
                scored = []
                for value in DIMENSIONS[name]:
                    trial = {**row, name: value}
                    if not valid(trial):
                        continue
                    gain = sum(((m, row[m]), (name, value)) in todo or ((name, value), (m, row[m])) in todo
                               for m in row)
                    scored.append((gain, rng.random(), value))
                row[name] = max(scored)[2]
            row = {n: row[n] for n in names}
            gain = len(covered([row]) & todo)
            if gain > best_gain:
                best, best_gain = row, gain
        rows.append(best)
        todo -= covered([best])
    return rows


def job_id(row: Dict[str, str]) -> str:
    """A short readable name of a row."""
    return "-".join(row[n] for n in DIMENSIONS)


WRITERS = {
    "inplace": '''
def write(obj, path):
    torch.save(obj, path)
''',
    "tmp_rename": '''
def write(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)
''',
    "tmp_fsync_rename": '''
def write(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
''',
    "tmp_fsync_rename_dirfsync": '''
def write(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
''',
    "bytesio_write_bytes": '''
def write(obj, path):
    buf = io.BytesIO()
    torch.save(obj, buf)
    pathlib.Path(path).write_bytes(buf.getvalue())
''',
    "unlink_rename": '''
def write(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    if os.path.exists(path):
        os.unlink(path)
    os.rename(tmp, path)
''',
}

ROTATIONS = {
    "overwrite": '''
def save(obj, step):
    path = os.path.join(CKPT, "last.pt")
    write(obj, path)
    mark(path)
''',
    "keep2": '''
def save(obj, step):
    path = os.path.join(CKPT, f"step_{step:06d}.pt")
    write(obj, path)
    mark(path)
    for old in checkpoints()[:-2]:
        drop(old)
''',
    "delete_before": '''
def save(obj, step):
    for old in checkpoints():
        drop(old)
    path = os.path.join(CKPT, f"step_{step:06d}.pt")
    write(obj, path)
    mark(path)
''',
    "delete_after": '''
def save(obj, step):
    path = os.path.join(CKPT, f"step_{step:06d}.pt")
    write(obj, path)
    mark(path)
    for old in checkpoints():
        if old != path:
            drop(old)
''',
}

MARKERS = {
    False: '''
def mark(path):
    pass


def drop(path):
    os.unlink(path)
''',
    True: '''
def mark(path):
    with open(path + ".done", "w") as f:
        f.write("done")


def drop(path):
    os.unlink(path)
    if os.path.exists(path + ".done"):
        os.unlink(path + ".done")
''',
}
"""A completion marker, written after the checkpoint, where the resume looks for one (``newest_marker``)."""

SAVERS = {
    "sync": '''
def checkpoint(state, step):
    save(state, step)
    say(f"saved step {step}")


def finish():
    pass
''',
    "thread_joined": '''
pending = None


def checkpoint(state, step):
    global pending
    finish()
    snapshot = copy.deepcopy(state)

    def work():
        save(snapshot, step)
        say(f"saved step {step}")

    pending = threading.Thread(target=work)
    pending.start()


def finish():
    if pending is not None:
        pending.join()
''',
    "daemon": '''
def checkpoint(state, step):
    snapshot = copy.deepcopy(state)

    def work():
        save(snapshot, step)
        say(f"saved step {step}")

    threading.Thread(target=work, daemon=True).start()


def finish():
    pass
''',
}
"""Who writes the checkpoint; ``saved step S`` is printed once it is written (by the saver thread, for a thread)."""

RESUMES = {
    "fixed": '''
def load():
    path = os.path.join(CKPT, "last.pt")
    return torch.load(path, weights_only=False) if os.path.exists(path) else None
''',
    "newest_by_name": '''
def load():
    found = checkpoints()
    return torch.load(found[-1], weights_only=False) if found else None
''',
    "newest_loads": '''
def load():
    for path in reversed(checkpoints()):
        try:
            return torch.load(path, weights_only=False)
        except Exception as e:
            say(f"cannot load {path}: {e}")
    return None
''',
    "newest_marker": '''
def load():
    for path in reversed(checkpoints()):
        if os.path.exists(path + ".done"):
            return torch.load(path, weights_only=False)
    return None
''',
}

DATA = {
    "loader_global": '''
loader = DataLoader(TensorDataset(X, Y), batch_size=BATCH, shuffle=True)


def batches(epoch, pos):
    return itertools.islice(iter(loader), pos, None)
''',
    "workers": '''
loader = DataLoader(TensorDataset(X, Y), batch_size=BATCH, shuffle=True, num_workers=2)


def batches(epoch, pos):
    return itertools.islice(iter(loader), pos, None)
''',
    "iterable": '''
class Stream(IterableDataset):
    epoch = 0

    def __iter__(self):
        order = torch.randperm(len(X), generator=torch.Generator().manual_seed(2000 + self.epoch))
        for i in order.tolist():
            yield X[i], Y[i]


stream = Stream()
loader = DataLoader(stream, batch_size=BATCH)


def batches(epoch, pos):
    stream.epoch = epoch
    return itertools.islice(iter(loader), pos, None)
''',
    "loader_gen": '''
gen = torch.Generator()
loader = DataLoader(TensorDataset(X, Y), batch_size=BATCH, shuffle=True, generator=gen)


def batches(epoch, pos):
    gen.manual_seed(1000 + epoch)
    return itertools.islice(iter(loader), pos, None)
''',
    "slice": '''
def batches(epoch, pos):
    for i in range(pos, EPOCH):
        yield X[i * BATCH:(i + 1) * BATCH], Y[i * BATCH:(i + 1) * BATCH]
''',
    "counter": '''
row = 0  # starts at 0 in every process: a resume replays the rows


def batches(epoch, pos):
    global row
    for _ in range(pos, EPOCH):
        start = row % len(X)
        row += BATCH
        yield X[start:start + BATCH], Y[start:start + BATCH]
''',
}


def script(row: Dict[str, str]) -> str:
    """The standalone job script of one row of the covering array."""
    every = int(row["every"])
    saved = row["saved"]
    state = ['"model": model.state_dict()', '"saved_at": step']
    if saved != "no_optimizer":
        state.append('"opt": opt.state_dict()')
    if saved != "no_scheduler":
        state.append('"sched": sched.state_dict()')
    state.append('"epoch": step // EPOCH' if saved == "epoch_only" else '"step": step')
    if row["rng"] in ("torch", "all"):
        state.append('"torch_rng": torch.get_rng_state()')
    if row["rng"] == "all":
        state.append('"py_rng": random.getstate()')
    quirk = row["quirk"]
    if quirk == "ema_weights":
        state.append('"ema": ema.state_dict()')
    restore = []
    if quirk == "step_before_load":
        restore += ['for p in model.parameters():', '    p.grad = torch.zeros_like(p)', 'opt.step()',
                    'opt.zero_grad()']
    restore.append(f'model.load_state_dict(ck["{"ema" if quirk == "ema_weights" else "model"}"])')
    if quirk == "ema_weights":
        restore.append('ema.load_state_dict(ck["ema"])')
    if saved != "no_optimizer":
        restore.append('opt.load_state_dict(ck["opt"])')
    if saved != "no_scheduler":
        restore.append('sched.load_state_dict(ck["sched"])')
    restore.append('step = ck["epoch"] * EPOCH' if saved == "epoch_only" else 'step = ck["step"]')
    if row["rng"] in ("torch", "all"):
        restore.append('torch.set_rng_state(ck["torch_rng"])')
    if row["rng"] == "all":
        restore.append('random.setstate(ck["py_rng"])')
    restore.append('say(f"resumed from step {ck[\'saved_at\']}")')
    restore.append('validate()')
    if quirk != "no_train_after_val":
        restore.append('model.train()')
    ema_step = ("        with torch.no_grad():\n            for e, q in zip(ema.parameters(), model.parameters()):\n"
                "                e.mul_(0.9).add_(q, alpha=0.1)\n") if quirk == "ema_weights" else ""
    layers = ("nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1)" if row["draws"] == "dropout"
              else "nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)")
    noise = "        x = x + 0.01 * random.gauss(0.0, 1.0)\n" if row["draws"] == "python" else ""
    ind = "\n    "
    return f'''"""Generated by bench/generated/jobgen.py (issue 31): {job_id(row)}

{chr(10).join(f"{n}: {row[n]}" for n in DIMENSIONS)}
"""

import copy
import glob
import io
import itertools
import os
import pathlib
import random
import sys
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

STEPS, BATCH, EPOCH, EVERY = {STEPS}, {BATCH}, {EPOCH}, {every}
CKPT = "ckpt"
os.makedirs(CKPT, exist_ok=True)
torch.manual_seed(0)
random.seed(0)
X = torch.randn(EPOCH * BATCH, 8)
Y = X[:, :2].sum(1, keepdim=True)
VX = torch.randn(16, 8)
VY = VX[:, :2].sum(1, keepdim=True)
model = nn.Sequential({layers})
{"ema = copy.deepcopy(model)" + chr(10) if quirk == "ema_weights" else ""}opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)


def say(line):
    """One line in one write: a saver thread's line never lands inside the training thread's."""
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


def checkpoints():
    return sorted(glob.glob(os.path.join(CKPT, "*.pt")))

{WRITERS[row["writer"]]}
{MARKERS[row["resume"] == "newest_marker"]}
{ROTATIONS[row["rotation"]]}
{SAVERS[row["saver"]]}
{RESUMES[row["resume"]]}
{DATA[row["data"]]}

def validate():
    model.eval()
    with torch.no_grad():
        v = nn.functional.mse_loss(model(VX), VY).item()
    return v


step = 0
ck = load()
if ck is not None:
    {ind.join(restore)}

while step < STEPS:
    epoch, pos = divmod(step, EPOCH)
    for x, y in batches(epoch, pos):
        batch = float(x.double().sum())
{noise}        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
{ema_step}        sched.step()
        step += 1
        say(f"step {{step}} loss {{loss.item()!r}} batch {{batch!r}}")
        if step % EVERY == 0:
            checkpoint({{{", ".join(state)}}}, step)
            validate()
            model.train()
        if step >= STEPS:
            break
finish()
say("finished")
'''


def every_value(rows: Sequence[Dict[str, str]]) -> List[int]:
    """The numbers of a few of ``rows`` that together hold every value of every dimension (a greedy set cover, the
    earlier row first on a tie): the sample the test suite runs."""
    todo = {(name, value) for name, values in DIMENSIONS.items() for value in values}
    chosen: List[int] = []
    while todo:
        gain = [len({(name, row[name]) for name in DIMENSIONS} & todo) for row in rows]
        best = max(range(len(rows)), key=lambda i: (gain[i], -i))
        if not gain[best]:
            raise ValueError(f"no row holds {sorted(todo)}")
        chosen.append(best)
        todo -= {(name, rows[best][name]) for name in DIMENSIONS}
    return sorted(chosen)


def sample(n: int, seed: int = 0) -> List[Dict[str, str]]:
    """``n`` rows: the covering array of ``seed`` first (the greedy array puts the rows that cover the most pairs
    first), then valid rows drawn at random by the same seed, none twice."""
    rows = covering_array(seed)
    seen = {job_id(r) for r in rows}
    rng = random.Random(f"draws-{seed}")
    while len(rows) < n:
        row = {name: rng.choice(values) for name, values in DIMENSIONS.items()}
        if valid(row) and job_id(row) not in seen:
            rows.append(row)
            seen.add(job_id(row))
    return rows[:n]
