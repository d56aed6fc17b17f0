"""A training job that keeps its exponential moving average as a module and saves it as Ultralytics does:
``ckpt["ema"]`` is a deepcopy of the EMA module in half precision (the whole ``nn.Module`` pickled) and
``ckpt["model"]`` is None, in one atomic checkpoint (``ckpt/last.pt``: temporary name, fsync, rename, folder
fsync). Like Ultralytics, its resume takes the model's weights from the EMA (``ckpt["ema"].float()``), so it
continues from weights no run had at a step. Every random stream it draws from is restored."""

import copy
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 3


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


torch.manual_seed(0)
g = torch.Generator().manual_seed(1234)
x = torch.randn(256, 16, generator=g)
y = x[:, :4].sum(1, keepdim=True)
loader_gen = torch.Generator().manual_seed(0)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=loader_gen)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
ema = copy.deepcopy(model).eval()
for p in ema.parameters():
    p.requires_grad_(False)

ckpt = Path("ckpt")
ckpt.mkdir(exist_ok=True)
last = ckpt / "last.pt"
start = 0
if last.exists():
    state = torch.load(last, weights_only=False)
    weights = state["ema"].float().state_dict()
    model.load_state_dict(weights)
    ema.load_state_dict(weights)
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch"])
    loader_gen.set_state(state["loader"])
    start = state["epoch"] + 1

for epoch in range(start, EPOCHS):
    for xb, yb in loader:
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
                e.mul_(0.9).add_(m, alpha=0.1)
    save_atomic({"epoch": epoch, "model": None, "ema": copy.deepcopy(ema).half(), "optimizer": opt.state_dict(),
                 "torch": torch.get_rng_state(), "loader": loader_gen.get_state()}, last)
    print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
print("finished", flush=True)
