"""A job that checkpoints everything but its learning-rate schedule (scheduler_job.truth.md says what it does).

It trains 32 steps of a small MLP with SGD and a CosineAnnealingLR stepped every step, and every 8 steps saves
the model, the optimizer, torch's RNG state and the step atomically (temporary file, fsync, rename, fsync of the
folder). By default the scheduler is not in the checkpoint: a resume makes a new one, whose ``last_epoch``
starts again at 0, so the learning rate differs from the uninterrupted run's from the second resumed step on.
``--save-scheduler`` saves and restores it too.
"""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=32)
p.add_argument("--every", type=int, default=8)
p.add_argument("--save-scheduler", action="store_true")
args = p.parse_args()


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
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
os.makedirs("ckpt", exist_ok=True)
path = os.path.join("ckpt", "last.pt")
start = 0
if os.path.exists(path):
    ckpt = torch.load(path, weights_only=False)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    torch.set_rng_state(ckpt["rng"])
    if "sched" in ckpt:
        sched.load_state_dict(ckpt["sched"])
    start = ckpt["step"]
    print(f"resumed from step {start}", flush=True)

for step in range(start + 1, args.steps + 1):
    x = torch.randn(16, 8)
    y = x[:, :2].sum(1, keepdim=True)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step} loss {loss.item():.6f} lr {sched.get_last_lr()[0]:.6f}", flush=True)
    if step % args.every == 0:
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "step": step}
        if args.save_scheduler:
            state["sched"] = sched.state_dict()
        save_atomic(state, path)
print("finished", flush=True)
