"""A training job that keeps an exponential moving average of its weights and saves, in one atomic checkpoint
(``ckpt/last.pt``: temporary name, fsync, rename, folder fsync), the model's state_dict under ``model``, the EMA
under ``ema``, a half-precision copy of the model under ``model_fp16`` and the model before its last update under
``prev_model``. Its resume loads into the model the tensors ``--load`` names: ``ema`` (the default, the bug: the
EMA's weights become the model's), ``fp16``, ``prev`` or ``model`` (right). Every random stream it draws from is
restored."""

import argparse
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

KEYS = {"model": "model", "ema": "ema", "fp16": "model_fp16", "prev": "prev_model"}

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--load", choices=sorted(KEYS), default="ema", help="the tensors the resume loads into the model")
args = p.parse_args()


def save_atomic(obj: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_of(module: nn.Module, dtype: torch.dtype = torch.float32) -> dict:
    return {k: v.detach().to(dtype).clone() for k, v in module.state_dict().items()}


torch.manual_seed(0)
g = torch.Generator().manual_seed(1234)
x = torch.randn(256, 16, generator=g)
y = x[:, :4].sum(1, keepdim=True)
loader_gen = torch.Generator().manual_seed(0)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=loader_gen)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
ema = copy_of(model)
prev = copy_of(model)

ckpt = Path("ckpt")
ckpt.mkdir(exist_ok=True)
last = ckpt / "last.pt"
start = 0
if last.exists():
    state = torch.load(last)
    model.load_state_dict(state[KEYS[args.load]])
    ema = state["ema"]
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["torch"])
    loader_gen.set_state(state["loader"])
    start = state["epoch"] + 1

for epoch in range(start, args.epochs):
    for xb, yb in loader:
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        prev = copy_of(model)
        opt.step()
        with torch.no_grad():
            for k, v in model.state_dict().items():
                ema[k].mul_(0.9).add_(v, alpha=0.1)
    save_atomic({"model": model.state_dict(), "ema": ema, "model_fp16": copy_of(model, torch.float16),
                 "prev_model": prev, "opt": opt.state_dict(), "epoch": epoch, "torch": torch.get_rng_state(),
                 "loader": loader_gen.get_state()}, last)
    print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
print("finished", flush=True)
