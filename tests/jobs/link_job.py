"""A job that keeps a hard-linked copy of every epoch's checkpoint and resumes from the newest of them.

Each epoch it ``torch.save``s its whole state into memory and writes the bytes to ``ckpt/last.pt.tmp`` through a
descriptor opened relative to the folder (``os.open(..., dir_fd=)``): the first two 1 KiB chunks with one
``os.writev``, the rest with ``os.pwrite`` at their offsets. Then it fsyncs the file, ``os.replace``s it over
``ckpt/last.pt`` (``src_dir_fd``/``dst_dir_fd``) and ``os.link``s ``last.pt`` to ``ckpt/epoch-N.pt`` and, as its
loss improves every epoch, to ``ckpt/best.pt`` (removed first). By default the folder is fsynced after the links;
``--naive`` fsyncs it only after the rename, so the links' names are not durable. The resume reads the newest
``epoch-N.pt``.

``LINK_PAUSE_IN_SAVE=SECONDS`` (for killing it by hand) pauses in the second save after half of its chunks."""

import io
import os
import random
import sys
import time

import torch
from torch import nn

EPOCHS = 3
CHUNK = 1024


def write_tmp(dfd, data, epoch):
    fd = os.open("last.pt.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dfd)
    try:
        view = memoryview(data)
        os.writev(fd, [view[:CHUNK], view[CHUNK:2 * CHUNK]])
        offsets = range(2 * CHUNK, len(data), CHUNK)
        for i, offset in enumerate(offsets):
            if i == len(offsets) // 2 and epoch == 1 and os.environ.get("LINK_PAUSE_IN_SAVE"):
                print("paused in the save", flush=True)
                time.sleep(float(os.environ["LINK_PAUSE_IN_SAVE"]))
            os.pwrite(fd, view[offset:offset + CHUNK], offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def save(state, epoch, improved, naive):
    buf = io.BytesIO()
    torch.save(state, buf)
    dfd = os.open("ckpt", os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_tmp(dfd, buf.getvalue(), epoch)
        os.replace("last.pt.tmp", "last.pt", src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
        os.link("ckpt/last.pt", f"ckpt/epoch-{epoch}.pt")
        if improved:
            if os.path.exists("ckpt/best.pt"):
                os.remove("ckpt/best.pt")
            os.link("ckpt/last.pt", "ckpt/best.pt")
        if not naive:
            os.fsync(dfd)
    finally:
        os.close(dfd)


def newest():
    epochs = [int(n[len("epoch-"):-len(".pt")]) for n in os.listdir("ckpt") if n.startswith("epoch-")]
    return f"ckpt/epoch-{max(epochs)}.pt" if epochs else None


def main():
    naive = "--naive" in sys.argv
    torch.manual_seed(0)
    random.seed(0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(1, keepdim=True)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    os.makedirs("ckpt", exist_ok=True)
    start, best = 0, float("inf")
    path = newest()
    if path is not None:
        ck = torch.load(path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["torch"])
        random.setstate(ck["python"])
        start, best = ck["epoch"] + 1, ck["best"]
        print(f"resumed from {path}", flush=True)
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
        save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "best": best,
              "torch": torch.get_rng_state(), "python": random.getstate()}, epoch, improved, naive)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
