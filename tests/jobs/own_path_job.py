"""A job that writes its own checkpoint folder's absolute path into every checkpoint, as Lightning's ModelCheckpoint
does (own_path_job.truth.md says what it leaves): its files are longer in a longer folder.

It trains 24 steps of a small MLP and every 8 steps saves the model, the optimizer, torch's RNG state, the step and
the folder's path with ``torch.save`` straight to ``ckpt/step_NN.pt``, then the same to ``ckpt/current.pt`` (in
place: no temporary file, no fsync; names of one length, so the two files are of one size, as Lightning's two
files of a save are). It resumes from ``ckpt/current.pt`` when that file exists, and fails if it cannot load it.
"""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=24)
p.add_argument("--every", type=int, default=8)
args = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
folder = os.path.abspath("ckpt")
os.makedirs(folder, exist_ok=True)
current = os.path.join(folder, "current.pt")
start = 0
if os.path.exists(current):
    ckpt = torch.load(current, weights_only=False)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    torch.set_rng_state(ckpt["rng"])
    start = ckpt["step"]
    print(f"resumed from step {start}", flush=True)

for step in range(start + 1, args.steps + 1):
    x = torch.randn(16, 8)
    loss = nn.functional.mse_loss(model(x), x[:, :2].sum(1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    if step % args.every == 0:
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "step": step,
                 "dirpath": folder}
        torch.save(state, os.path.join(folder, f"step_{step:02d}.pt"))
        torch.save(state, current)
