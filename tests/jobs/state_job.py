"""A job whose checkpoint may leave out parts of its training state (state_job.truth.md says what each costs).

It trains 32 steps of a small MLP with batch norm, Adam and a CosineAnnealingLR stepped every step, on a fresh
``torch.randn`` batch each step, and every 8 steps saves atomically (temporary file, fsync, rename, fsync of the
folder) the model, the optimizer, the scheduler, torch's RNG state and the step. ``--unsaved PART`` (repeatable)
leaves one part out of the checkpoint: ``optimizer`` (Adam's moments start again from zero), ``scheduler`` (its
``last_epoch`` starts again at 0), ``buffers`` (the model's parameters only: batch norm's running statistics start
again). With no ``--unsaved`` it restores everything: the control. It calls ``model.train()`` before training, as
a resume that may follow a validation pass must (``model.training`` is in no state dict).
"""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=32)
p.add_argument("--every", type=int, default=8)
p.add_argument("--unsaved", action="append", default=[], choices=["optimizer", "scheduler", "buffers"])
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
model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
os.makedirs("ckpt", exist_ok=True)
path = os.path.join("ckpt", "last.pt")
start = 0
if os.path.exists(path):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"], strict="buffers" not in args.unsaved)
    for name, key in (("opt", "optimizer"), ("sched", "scheduler")):
        if key not in args.unsaved:
            (opt if name == "opt" else sched).load_state_dict(ckpt[name])
    torch.set_rng_state(ckpt["rng"])
    start = ckpt["step"]
    print(f"resumed from step {start}", flush=True)
model.train()

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
        weights = dict(model.named_parameters()) if "buffers" in args.unsaved else model.state_dict()
        state = {"model": {k: v.detach() for k, v in weights.items()}, "rng": torch.get_rng_state(), "step": step}
        if "optimizer" not in args.unsaved:
            state["opt"] = opt.state_dict()
        if "scheduler" not in args.unsaved:
            state["sched"] = sched.state_dict()
        save_atomic(state, path)
print("finished", flush=True)
