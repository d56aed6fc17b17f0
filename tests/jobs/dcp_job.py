"""A small torch.distributed.checkpoint job on 2 gloo ranks, with DTensor parameters (FSDP2's fully_shard),
resuming through get_state_dict / set_state_dict as torchtitan does.

Saves ckpt/step_N/ with dcp.save every few steps. By default the resume takes the highest-numbered
folder without checking that DCP finished it (``.metadata`` is written last, by rank 0): a kill in a save
leaves a folder without it, and the resume crashes on it while the older folder is complete.
``--resume-complete`` takes the newest folder holding ``.metadata``: the robust configuration.
"""

import argparse
import glob
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--every", type=int, default=4)
p.add_argument("--resume-complete", action="store_true", help="resume from the newest folder holding .metadata")


def main():
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    folders = sorted(glob.glob("ckpt/step_*"), key=lambda f: int(f.rsplit("_", 1)[1]))
    if args.resume_complete:
        folders = [f for f in folders if os.path.exists(os.path.join(f, ".metadata"))]
    start = 0
    if folders:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=folders[-1])
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["step"])
    g = torch.Generator().manual_seed(1234 + dist.get_rank())
    x = torch.randn(args.steps * 8, 8, generator=g)
    for step in range(start, args.steps):
        xb = x[step * 8:(step + 1) * 8]
        loss = nn.functional.mse_loss(model(xb), xb.sum(1, keepdim=True))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if (step + 1) % args.every == 0:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd, "step": torch.tensor(step + 1)}, checkpoint_id=f"ckpt/step_{step + 1}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
