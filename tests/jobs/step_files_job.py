"""A job that keeps its checkpoints as step-named files in one folder (``ckpt/step_000008.pt``), rotated by hand,
and resumes from the newest by name (step_files_job.truth.md says what each variant costs).

It trains 32 steps with SGD and momentum on a fixed dataset sliced by the step, and every 8 steps saves the model,
the optimizer and the step through a temporary file, fsynced and renamed, then fsyncs the folder. Variants:
``--rotate before`` deletes the old file before writing the new one (the usual slip: a kill during the write leaves
no complete checkpoint); ``--rotate after`` (the default) deletes it once the new one is in place. ``--writer
bytes`` serializes into memory and writes the new file's bytes straight to its final name (``Path.write_bytes``),
keeping the newest 2, so a kill leaves a torn newest file beside a complete older one; ``--resume loads`` then takes
the newest file that loads, instead of the newest by name.
"""

import argparse
import io
import os
from pathlib import Path

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--rotate", choices=["before", "after"], default="after")
p.add_argument("--writer", choices=["atomic", "bytes"], default="atomic")
p.add_argument("--resume", choices=["newest", "loads"], default="newest")
args = p.parse_args()
STEPS, BATCH, EVERY = 32, 8, 8
KEEP = 2 if args.writer == "bytes" else 1
folder = Path("ckpt")


def write(obj, path):
    if args.writer == "bytes":
        buf = io.BytesIO()
        torch.save(obj, buf)
        path.write_bytes(buf.getvalue())
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoints():
    return sorted(folder.glob("step_*.pt"))


def save(obj, step):
    old = checkpoints()
    if args.rotate == "before":
        for path in old[:len(old) - KEEP + 1]:
            path.unlink()
    write(obj, folder / f"step_{step:06d}.pt")
    if args.rotate == "after":
        for path in old[:len(old) - KEEP + 1]:
            path.unlink()


def load():
    for path in reversed(checkpoints()):
        try:
            return torch.load(path, weights_only=True)
        except Exception:
            if args.resume == "newest":
                raise
    return None


torch.manual_seed(0)
data = torch.randn(STEPS * BATCH, 8)
target = data[:, :2].sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
folder.mkdir(exist_ok=True)
step = 0
ckpt = load()
if ckpt is not None:
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    step = ckpt["step"]
print(f"resumed from step {step}", flush=True)

while step < STEPS:
    x, y = data[step * BATCH:(step + 1) * BATCH], target[step * BATCH:(step + 1) * BATCH]
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    if step % EVERY == 0:
        save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, step)
        print(f"saved step {step}", flush=True)
print("finished", flush=True)
