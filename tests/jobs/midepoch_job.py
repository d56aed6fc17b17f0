"""A training job that checkpoints every 5 steps, in the middle of its 12-step epochs, atomically (temporary file,
fsync, rename, folder fsync), with the model, the optimizer and the epoch. Its loader reshuffles from a generator
seeded with the epoch at each epoch start, so the epoch alone fixes the batch order. What it does on resume:

* ``--resume next-epoch`` (default): starts the epoch after the saved one, skipping the rest of the saved epoch;
* ``--resume epoch-start``: starts the saved epoch again from its first batch, replaying its first steps;
* ``--resume position``: also saves how many batches of the epoch were trained and skips that many on resume,
  which reproduces the uninterrupted run.

``--dropout`` adds a dropout layer and saves and restores torch's RNG state with the rest: the stream is restored,
so a replay or a skip is the one cause (midepoch_job.truth.md)."""

import argparse
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--every", type=int, default=5, help="save every this many steps")
p.add_argument("--resume", choices=("next-epoch", "epoch-start", "position"), default="next-epoch")
p.add_argument("--dropout", action="store_true", help="train with dropout, torch's RNG state in the checkpoint")
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
x = torch.randn(96, 16, generator=g)
y = x[:, :4].sum(1, keepdim=True)
loader_gen = torch.Generator()
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=loader_gen)
layers = [nn.Linear(16, 64), nn.ReLU()] + ([nn.Dropout(0.2)] if args.dropout else []) + [nn.Linear(64, 1)]
model = nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

ckpt = Path("ckpt")
ckpt.mkdir(exist_ok=True)
last = ckpt / "last.pt"
start_epoch, skip, step = 0, 0, 0
if last.exists():
    state = torch.load(last)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
    if args.dropout:
        torch.set_rng_state(state["rng"])
    if args.resume == "next-epoch":
        start_epoch = state["epoch"] + 1
    elif args.resume == "epoch-start":
        start_epoch = state["epoch"]
    else:
        start_epoch, skip = state["epoch"], state["position"]
    print(f"resumed at step {step}: epoch {start_epoch}, skipping {skip} batches", flush=True)

for epoch in range(start_epoch, args.epochs):
    loader_gen.manual_seed(epoch)
    for position, (xb, yb) in enumerate(loader):
        if epoch == start_epoch and position < skip:
            continue
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} epoch {epoch} loss {loss.item():.6f}", flush=True)
        if step % args.every == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "step": step}
            if args.resume == "position":
                state["position"] = position + 1
            if args.dropout:
                state["rng"] = torch.get_rng_state()
            save_atomic(state, last)
print("finished", flush=True)
