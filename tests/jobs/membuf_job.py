"""A training job that serializes its checkpoint into memory, then writes the bytes to ``ckpt/last.pt`` in place
(``torch.save`` into a ``BytesIO``, then ``Path.write_bytes``): no temporary name, no fsync. Killed or out of disk
in that file write, it leaves a torn ``last.pt`` that the resume fails to load. ``--robust`` writes the bytes to
``last.pt.tmp``, fsyncs it, renames it over ``last.pt`` and fsyncs the folder. It resumes from ``last.pt`` if
present, restoring every random stream it draws from. ``--fallback``: a ``last.pt`` that does not load is skipped
(the error printed) and the job starts from scratch, as a resume that tries the newest file that loads does when
there is no other."""

import argparse
import io
import os
import random
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--robust", action="store_true", help="temporary file, fsync, rename, directory fsync")
p.add_argument("--fallback", action="store_true", help="start from scratch when last.pt does not load")
args = p.parse_args()


def write_robust(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


torch.manual_seed(0)
random.seed(0)
g = torch.Generator().manual_seed(1234)
x = torch.randn(256, 16, generator=g)
y = x[:, :4].sum(1, keepdim=True)
loader_gen = torch.Generator().manual_seed(0)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=loader_gen)
model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

ckpt = Path("ckpt")
ckpt.mkdir(exist_ok=True)
last = ckpt / "last.pt"
start = 0
state = None
if last.exists():
    try:
        state = torch.load(last)
    except Exception as e:
        if not args.fallback:
            raise
        print(f"cannot load {last}: {e}", flush=True)
if state is not None:
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    loader_gen.set_state(state["loader"])
    start = state["epoch"] + 1

for epoch in range(start, args.epochs):
    for xb, yb in loader:
        xb = xb + 0.01 * random.random()
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "torch": torch.get_rng_state(),
                "python": random.getstate(), "loader": loader_gen.get_state()}, buf)
    if args.robust:
        write_robust(last, buf.getvalue())
    else:
        last.write_bytes(buf.getvalue())
    print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
print("finished", flush=True)
