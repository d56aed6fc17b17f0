"""A training job that, on resume, takes one Adam step with zero gradients before it loads its checkpoint: the step
creates the optimizer's state (exp_avg, exp_avg_sq, step) that some loaders expect to fill in, and moves no
parameter. Then it loads the newest checkpoint (model, optimizer, epoch; saved at each epoch end atomically:
temporary file, fsync, rename, folder fsync) and trains on as the uninterrupted run did. Its loader reshuffles from
a generator seeded with the epoch, and nothing else draws random numbers."""

import argparse
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
args = p.parse_args()


def save_atomic(state: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


torch.manual_seed(0)
g = torch.Generator().manual_seed(1234)
x = torch.randn(64, 16, generator=g)
y = x[:, :4].sum(1, keepdim=True)
loader_gen = torch.Generator()
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=loader_gen)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.003)

ckpt = Path("ckpt")
ckpt.mkdir(exist_ok=True)
last = ckpt / "last.pt"
start = 0
if last.exists():
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    opt.step()  # materialize Adam's state before loading into it; zero gradients move nothing
    opt.zero_grad()
    state = torch.load(last)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["epoch"] + 1
    print(f"resumed after epoch {state['epoch']}", flush=True)

step = start * len(loader)
for epoch in range(start, args.epochs):
    loader_gen.manual_seed(epoch)
    for xb, yb in loader:
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} epoch {epoch} loss {loss.item():.6f}", flush=True)
    save_atomic({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, last)
print("finished", flush=True)
