"""A job that takes its batches by slicing a tensor with a counter that starts at 0 in every process (no DataLoader),
and whose checkpoint holds the step but not that counter (counter_job.truth.md says what it costs).

It draws a fixed dataset of 256 rows once and trains 32 steps on consecutive slices of 8 rows, with SGD and
momentum, saving atomically every 8 steps the model, the optimizer and the step. A resume continues the step count
from the checkpoint, but its counter starts again at row 0: it trains once more on the batches the checkpoint
already holds. ``--robust`` derives the counter from the restored step.
"""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--every", type=int, default=8)
p.add_argument("--robust", action="store_true")
args = p.parse_args()
STEPS, BATCH = 32, 8


def save_atomic(obj, path):
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


torch.manual_seed(0)
data = torch.randn(STEPS * BATCH, 8)
target = data[:, :2].sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
os.makedirs("ckpt", exist_ok=True)
path = os.path.join("ckpt", "last.pt")
step, row = 0, 0
if os.path.exists(path):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    step = ckpt["step"]
    if args.robust:
        row = step * BATCH
    print(f"resumed from step {step}, row {row}", flush=True)

while step < STEPS:
    x, y = data[row:row + BATCH], target[row:row + BATCH]
    row += BATCH
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    if step % args.every == 0:
        save_atomic({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path)
print("finished", flush=True)
