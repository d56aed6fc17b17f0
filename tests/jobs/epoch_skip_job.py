"""A job whose mid-epoch checkpoint records only the epoch, resumed at the next epoch, with its shuffle order drawn
from torch's stream and never restored (epoch_skip_job.truth.md says what that costs: the resume replays the first
epochs' batches).

It draws a fixed dataset of 64 rows once, then trains 4 epochs of 8 steps each on batches of 8 rows sliced from a
``torch.randperm`` order drawn at each epoch's start (no DataLoader), through dropout, with SGD and momentum. Every 6 steps it saves
atomically the model, the optimizer and the epoch in progress, but neither the position in the epoch nor torch's
RNG state; a resume starts at the epoch after the saved one, skipping the rest of the saved epoch.
``--robust`` saves the position and the RNG state too, and resumes where the checkpoint was taken. ``--reseed``
seeds torch with the epoch it resumes at (``torch.manual_seed(epoch)``, a common ``seed + epoch``): the resume then
both skips the rest of the saved epoch and draws orders the uninterrupted run never drew, two defects at once.
"""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--every", type=int, default=6)
p.add_argument("--robust", action="store_true")
p.add_argument("--reseed", action="store_true", help="on resume, seed torch with the epoch it resumes at")
args = p.parse_args()
EPOCHS, ROWS, BATCH = 4, 64, 8


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
data = torch.randn(ROWS, 8)
target = data[:, :2].sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
os.makedirs("ckpt", exist_ok=True)
path = os.path.join("ckpt", "last.pt")
first_epoch, skip, step = 0, 0, 0
if os.path.exists(path):
    ckpt = torch.load(path, weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    step = ckpt["step"]
    if args.robust:
        torch.set_rng_state(ckpt["rng"])
        first_epoch, skip = ckpt["epoch"], ckpt["position"]
    else:
        first_epoch = ckpt["epoch"] + 1
        if args.reseed:
            torch.manual_seed(first_epoch)
    print(f"resumed from step {step}, epoch {first_epoch}", flush=True)

for epoch in range(first_epoch, EPOCHS):
    if skip:
        order = torch.tensor(ckpt["order"])
    else:
        order = torch.randperm(ROWS)
    for position in range(skip, ROWS // BATCH):
        rows = order[position * BATCH:(position + 1) * BATCH]
        loss = nn.functional.mse_loss(model(data[rows]), target[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} epoch {epoch} loss {loss.item():.6f}", flush=True)
        if step % args.every == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "step": step}
            if args.robust:
                state.update(position=position + 1, rng=torch.get_rng_state(), order=order.tolist())
            save_atomic(state, path)
    skip = 0
print("finished", flush=True)
