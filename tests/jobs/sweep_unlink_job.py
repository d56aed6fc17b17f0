"""A job whose save unlinks its old checkpoint before renaming the new one over it.

Each epoch writes ``ckpt/tmp.pt`` in 1 KiB chunks, fsyncing after each, removes ``ckpt/last.pt`` and only then renames ``tmp.pt`` to
``last.pt``. A crash between the unlink and the rename leaves only ``tmp.pt``: the resume looks for ``last.pt``
alone, finds nothing and trains from scratch (see sweep_unlink_job.truth.md).
"""

import argparse
import io
import os
import random
import time

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--pause-after-unlink", type=float, default=0.0,
               help="sleep this long between the unlink and the rename (to kill the job there by hand)")

CHUNK = 1024


def save(state, pause):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    with open("ckpt/tmp.pt", "wb") as f:
        for start in range(0, len(data), CHUNK):  # each chunk made durable, as savers bounding dirty pages do
            f.write(data[start:start + CHUNK])
            f.flush()
            os.fsync(f.fileno())
    if os.path.exists("ckpt/last.pt"):
        os.unlink("ckpt/last.pt")
        if pause:
            print("unlinked ckpt/last.pt", flush=True)
            time.sleep(pause)
    os.rename("ckpt/tmp.pt", "ckpt/last.pt")


def main():
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(32, 4, generator=g)
    y = x.sum(1, keepdim=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs("ckpt", exist_ok=True)

    start = 0
    if os.path.exists("ckpt/last.pt"):
        ck = torch.load("ckpt/last.pt")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = ck["epoch"] + 1
        print(f"resumed from epoch {ck['epoch']}", flush=True)
    else:
        print("no ckpt/last.pt: training from scratch", flush=True)

    for epoch in range(start, args.epochs):
        for i in range(0, len(x), 8):
            loss = ((model(x[i:i + 8]) - y[i:i + 8]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, args.pause_after_unlink)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
