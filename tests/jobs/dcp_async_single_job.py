"""A one-process job (no process group) that checkpoints with torch.distributed.checkpoint.async_save: a background
thread writes ckpt/step_N/ while the training goes on (dcp_async_single_job.truth.md says by which thread).

Every 8 steps of 24 it starts saving ckpt/step_N/. By default (robust) it takes the previous save's
future.result() before starting the next, then deletes the folders older than that complete one, takes the last
result() at exit, and resumes from the newest folder holding .metadata. ``--naive`` deletes every older folder as
soon as async_save returns, while the new save is still being written, never waits for a save (its futures are
dropped), and resumes from the highest-numbered folder. DCP_SINGLE_PAUSE=seconds holds the save of step 16 in its
background thread, after the shard is written and before .metadata, for a kill by hand.
"""

import argparse
import glob
import os
import shutil
import time

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=24)
p.add_argument("--every", type=int, default=8)
p.add_argument("--width", type=int, default=1024)
p.add_argument("--naive", action="store_true", help="rotate as soon as async_save returns, never wait for a save")


class PausingWriter(dcp.FileSystemWriter):
    """DCP's own file writer, which can hold a save after its shard is written (the hand-kill hook)."""

    def __init__(self, path, pause):
        super().__init__(path)
        self.pause = pause

    def write_data(self, plan, planner):
        written = super().write_data(plan, planner)
        if self.pause:
            print(f"paused in the save of {self.path} at {time.time():.3f}", flush=True)
            time.sleep(self.pause)
        return written


def folders(complete_only):
    found = sorted(glob.glob("ckpt/step_*"), key=lambda f: int(f.rsplit("_", 1)[1]))
    return [f for f in found if os.path.exists(os.path.join(f, ".metadata"))] if complete_only else found


def resume(model, opt, naive):
    found = folders(complete_only=not naive)
    if not found:
        return 0
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=found[-1])
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    print(f"resumed from {found[-1]}", flush=True)
    return int(state["step"])


def rotate(keep_from):
    """Delete the folders of steps before ``keep_from``."""
    for old in folders(complete_only=False):
        if int(old.rsplit("_", 1)[1]) < keep_from:
            shutil.rmtree(old, ignore_errors=True)


def save(model, opt, step, pending, args):
    if pending is not None and not args.naive:
        pending.result()
    pause = float(os.environ.get("DCP_SINGLE_PAUSE", "0")) if step == 2 * args.every else 0.0
    msd, osd = get_state_dict(model, opt)
    future = dcp.async_save({"model": msd, "optim": osd, "step": torch.tensor(step)},
                            storage_writer=PausingWriter(f"ckpt/step_{step}", pause))
    print(f"save of step {step} started at {time.time():.3f}", flush=True)
    rotate(keep_from=step if args.naive else step - args.every)
    return future


def main():
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = resume(model, opt, args.naive)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(args.steps * 64, 16, generator=g)
    pending = None
    for step in range(start, args.steps):
        xb = x[step * 64:(step + 1) * 64]
        loss = nn.functional.mse_loss(model(xb), xb.sum(1, keepdim=True))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step + 1} loss {loss.item():.6f} at {time.time():.3f}", flush=True)
        if (step + 1) % args.every == 0:
            pending = save(model, opt, step + 1, pending, args)
    if pending is not None and not args.naive:
        pending.result()


if __name__ == "__main__":
    main()
