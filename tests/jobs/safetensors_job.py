"""A job that saves its model with ``safetensors.torch.save_file`` to ``ckpt/model.safetensors`` after every
epoch, its epoch in the file's metadata, and resumes from it. safetensors (0.8) writes a temporary file
``ckpt/.tmpXXXXXX`` and renames it over the final name, with no fsync: a kill leaves the old file whole; a
power loss under the ordered model can leave the renamed name empty.

Plain SGD (no optimizer state), batches in a fixed order, no random draws: the model and the epoch are the
whole training state. ``SAFETENSORS_PAUSE_BEFORE_SAVE=SECONDS`` pauses before the second save, for a hand look."""

import os
import time

import torch
from safetensors.torch import load_file, save_file
from safetensors import safe_open
from torch import nn

EPOCHS = 3
PATH = "ckpt/model.safetensors"


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(1, keepdim=True)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    os.makedirs("ckpt", exist_ok=True)
    start = 0
    if os.path.exists(PATH):
        model.load_state_dict(load_file(PATH))
        with safe_open(PATH, framework="pt") as f:
            start = int(f.metadata()["epoch"]) + 1
        print(f"resumed from {PATH} at epoch {start}", flush=True)
    for epoch in range(start, EPOCHS):
        total = 0.0
        for rows in torch.arange(len(x)).split(8):
            loss = ((model(x[rows]) - y[rows]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / 8:.4f}", flush=True)
        if epoch == 1 and os.environ.get("SAFETENSORS_PAUSE_BEFORE_SAVE"):
            print("paused before the save", flush=True)
            time.sleep(float(os.environ["SAFETENSORS_PAUSE_BEFORE_SAVE"]))
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, PATH, metadata={"epoch": str(epoch)})
    print("finished", flush=True)


if __name__ == "__main__":
    main()
