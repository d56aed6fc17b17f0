"""A torch.distributed.checkpoint job on 2 gloo ranks that checkpoints with dcp.async_save: the shards and
.metadata are written in the background while training goes on (dcp_async_job.truth.md says by which thread
or process).

Every few steps it starts saving ckpt/step_N/ and keeps at most 2 folders. By default (naive) it deletes the
older folders as soon as async_save returns, while the new save is still being written, never looks at the
save's outcome (it waits for the previous save to end before the next, with futures.wait, which never raises
its error), and resumes from the highest-numbered folder. ``--robust`` takes the previous save's
future.result() before starting the next, deletes only folders older than that complete one, takes the last
result() at exit, and resumes from the newest folder holding .metadata. ``--process`` has DCP's helper
process do the writes. DCP_ASYNC_PAUSE_IN_SAVE=seconds holds every save after the first in the background,
after this rank's shard and before .metadata, for a kill by hand.
"""

import argparse
import concurrent.futures as futures
import glob
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
from torch.distributed.fsdp import fully_shard

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=16)
p.add_argument("--every", type=int, default=4)
p.add_argument("--width", type=int, default=768)
p.add_argument("--robust", action="store_true", help="wait on each save before the next and before rotating")
p.add_argument("--process", action="store_true", help="AsyncCheckpointerType.PROCESS: a helper process writes")


class PausingWriter(dcp.FileSystemWriter):
    """DCP's own file writer, which can hold a save after this rank's shard is written (the hand-kill hook)."""

    def __init__(self, path, pause):
        super().__init__(path)
        self.pause = pause

    def write_data(self, plan, planner):
        written = super().write_data(plan, planner)
        if self.pause:
            print(f"pid {os.getpid()} paused in the save of {self.path} at {time.time():.3f}", flush=True)
            time.sleep(self.pause)
        return written


def folders(complete_only):
    found = sorted(glob.glob("ckpt/step_*"), key=lambda f: int(f.rsplit("_", 1)[1]))
    return [f for f in found if os.path.exists(os.path.join(f, ".metadata"))] if complete_only else found


def resume(model, opt, robust):
    found = folders(complete_only=robust)
    if not found:
        return 0
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=found[-1])
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    print(f"resumed from {found[-1]}", flush=True)
    return int(state["step"])


def rotate(keep_from):
    """Delete the folders of steps before ``keep_from`` (rank 0)."""
    if dist.get_rank() == 0:
        for old in folders(complete_only=False):
            if int(old.rsplit("_", 1)[1]) < keep_from:
                shutil.rmtree(old, ignore_errors=True)


def finished(pending, robust):
    """Wait for the save in flight: --robust through result(), which raises the save's error; naive through
    wait(), which never looks at it. Two saves at once would interleave their collectives on the group and hang."""
    if pending is not None and robust:
        pending.result()
    elif pending is not None:
        futures.wait([pending])


def save(model, opt, step, pending, args, group):
    finished(pending, args.robust)
    msd, osd = get_state_dict(model, opt)
    pause = float(os.environ.get("DCP_ASYNC_PAUSE_IN_SAVE", "0")) if step > args.every else 0.0
    kind = AsyncCheckpointerType.PROCESS if args.process else AsyncCheckpointerType.THREAD
    future = dcp.async_save({"model": msd, "optim": osd, "step": torch.tensor(step)},
                            storage_writer=PausingWriter(f"ckpt/step_{step}", pause), process_group=group,
                            async_checkpointer_type=kind)
    print(f"save of step {step} started at {time.time():.3f}", flush=True)
    rotate(keep_from=step - args.every if args.robust else step)
    return future


def main():
    args = p.parse_args()
    dist.init_process_group("gloo")
    group = dist.new_group(backend="gloo")  # the background save's collectives stay off training's group
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 1))
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = resume(model, opt, args.robust)
    g = torch.Generator().manual_seed(1234 + dist.get_rank())
    x = torch.randn(args.steps * 64, 16, generator=g)
    pending = None
    for step in range(start, args.steps):
        xb = x[step * 64:(step + 1) * 64]
        loss = nn.functional.mse_loss(model(xb), xb.sum(1, keepdim=True))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {dist.get_rank()} step {step + 1} loss {loss.item():.6f} at {time.time():.3f}", flush=True)
        if (step + 1) % args.every == 0:
            pending = save(model, opt, step + 1, pending, args, group)
    finished(pending, args.robust)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
