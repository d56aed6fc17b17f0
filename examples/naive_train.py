"""A training job that looks fine until it is killed in the middle of a save.

It torch.save()s straight over its only checkpoint, so the previous checkpoint is
destroyed the moment a new save begins; killed mid-save, it leaves a torn file
that the auto-resume then fails to load.

Run it under chaosckpt:  chaosckpt run examples/naive_train.py --scenario kill9-mid-save
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n=512):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :4].sum(1, keepdim=True) > 0).float()
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--ckpt-dir", default="ckpt")
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(make_data(), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, "last.pt")
    start_epoch = 0
    if os.path.exists(path):
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        start_epoch = ckpt["epoch"] + 1

    for epoch in range(start_epoch, args.epochs):
        for x, y in loader:
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, path)
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
