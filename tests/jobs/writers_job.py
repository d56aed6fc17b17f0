"""A plain-torch job whose checkpoint is three writers' files, all in place, every 2 steps: the model and
optimizer (``torch.save``, or ``--safetensors``: the weights through ``safetensors.torch.save_file`` and the
optimizer through torch.save), ``state.json`` (the step and Python's random state, through ``open``), and
``best.pth``, a ``shutil.copyfile`` of the model that the resume never reads. It resumes from what it finds."""

import argparse
import json
import os
import random
import shutil

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--safetensors", action="store_true")
args = p.parse_args()

os.makedirs("ckpt", exist_ok=True)
model_path = "ckpt/model.safetensors" if args.safetensors else "ckpt/model.pth"
torch.manual_seed(0)
random.seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
if os.path.exists("ckpt/state.json"):
    with open("ckpt/state.json") as f:
        state = json.load(f)
    if args.safetensors:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(model_path))
        saved = torch.load("ckpt/optim.pth")
    else:
        saved = torch.load(model_path)
        model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    torch.set_rng_state(saved["rng"])
    random.setstate((state["random"][0], tuple(state["random"][1]), state["random"][2]))
    step = state["step"]
while step < args.steps:
    x = torch.randn(8, 4) + random.random()
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 2 == 0:
        if args.safetensors:
            from safetensors.torch import save_file

            save_file(model.state_dict(), model_path)
            torch.save({"opt": opt.state_dict(), "rng": torch.get_rng_state()}, "ckpt/optim.pth")
        else:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state()}, model_path)
        with open("ckpt/state.json", "w") as f:
            json.dump({"step": step, "random": random.getstate()}, f)
        shutil.copyfile(model_path, "ckpt/best.pth")
