"""A job that saves ``ckpt/last.pt`` atomically (temporary file, fsync, os.replace, folder fsync) after every epoch
and, since its loss improves every epoch, then copies it over ``ckpt/best.pt`` in place with ``shutil.copyfile``.
It resumes from ``last.pt`` alone: a kill inside the copy leaves ``best.pt`` torn, never the resume.

``BESTCOPY_PAUSE_IN_COPY=SECONDS`` (for killing it by hand) copies in 4 KiB chunks with that pause after the
first, so that a ``kill -9`` lands inside the copy."""

import os
import random
import shutil
import time

import torch
from torch import nn

EPOCHS = 3


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomic(obj, path):
    with open(path + ".tmp", "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fsync_dir(os.path.dirname(path))


def copy_best(src, dst):
    pause = float(os.environ.get("BESTCOPY_PAUSE_IN_COPY", "0"))
    if not pause:
        shutil.copyfile(src, dst)
        return
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(fin.read(4096))
        fout.flush()
        print(f"paused in the copy to {dst}", flush=True)
        time.sleep(pause)
        fout.write(fin.read())


def main():
    torch.manual_seed(0)
    random.seed(0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(1, keepdim=True)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    os.makedirs("ckpt", exist_ok=True)
    start, best = 0, float("inf")
    if os.path.exists("ckpt/last.pt"):
        ck = torch.load("ckpt/last.pt")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["torch"])
        random.setstate(ck["python"])
        start, best = ck["epoch"] + 1, ck["best"]
    for epoch in range(start, EPOCHS):
        total = 0.0
        for rows in torch.randperm(len(x)).split(8):
            loss = ((model(x[rows] + 0.01 * random.random()) - y[rows]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / 8:.4f}", flush=True)
        improved = total < best
        best = min(best, total)
        save_atomic({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "best": best,
                     "torch": torch.get_rng_state(), "python": random.getstate()}, "ckpt/last.pt")
        if improved:
            copy_best("ckpt/last.pt", "ckpt/best.pt")
    print("finished", flush=True)


if __name__ == "__main__":
    main()
