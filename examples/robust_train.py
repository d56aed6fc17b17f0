"""A training job that survives being killed mid-save and resumes bit for bit.

What makes it robust:
- every checkpoint is written to a temporary name, flushed, fsynced, renamed over
  the old one with os.replace, and the directory is fsynced;
- the checkpoint carries every random stream the loop draws from (torch, Python's
  random, numpy, the DataLoader's generator) and the epoch;
- it resumes by itself from the newest checkpoint it finds.

Run it under chaosckpt:  chaosckpt run examples/robust_train.py --scenario kill9-mid-save
"""

import argparse
import os
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n=512):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :4].sum(1, keepdim=True) > 0).float()
    return TensorDataset(x, y)


def save_atomic(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--ckpt-dir", default="ckpt")
    args = parser.parse_args()

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    loader_gen = torch.Generator().manual_seed(0)
    loader = DataLoader(make_data(), batch_size=32, shuffle=True, generator=loader_gen)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, "last.pt")
    start_epoch = 0
    if os.path.exists(path):
        ckpt = torch.load(path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        random.setstate(ckpt["rng"]["python"])
        np.random.set_state(ckpt["rng"]["numpy"])
        loader_gen.set_state(ckpt["rng"]["loader"])
        start_epoch = ckpt["epoch"] + 1
        print(f"resumed from epoch {ckpt['epoch']}")

    for epoch in range(start_epoch, args.epochs):
        model.train()
        for x, y in loader:
            x = x + 0.01 * float(np.random.randn()) + 0.01 * random.random()  # augmentation noise
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        save_atomic(
            {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "epoch": epoch,
                "rng": {
                    "torch": torch.get_rng_state(),
                    "python": random.getstate(),
                    "numpy": np.random.get_state(),
                    "loader": loader_gen.get_state(),
                },
            },
            path,
        )
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
