"""A small training job whose checkpoint folder can lie anywhere: ``--ckpt`` (relative, a link, or absolute),
``--chdir`` before saving, ``--input`` read before training. Saves atomically and resumes from the newest."""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--ckpt", default="ckpt")
p.add_argument("--chdir", default=None)
p.add_argument("--input", default=None)
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()

if args.input:
    with open(args.input, "rb") as f:
        f.seek(-16, os.SEEK_END)
        f.read()
if args.chdir:
    os.chdir(args.chdir)
os.makedirs(args.ckpt, exist_ok=True)
last = os.path.join(args.ckpt, "last.pt")

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
if os.path.exists(last):
    state = torch.load(last)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["rng"])
    step = state["step"]
while step < args.steps:
    x = torch.randn(8, 4)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 2 == 0:
        tmp = last + ".tmp"
        with open(tmp, "wb") as f:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(),
                        "step": step}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, last)
