"""A job that forges its own durability journal to make chaosckpt, rebuilding the disk after a power loss as the
host's root, write outside the sandbox (issue 32, item 2).

It trains and saves durably (``ckpt/last.pt``: written to a temporary name, fsynced, renamed), and after its first
save appends ``op`` events to its own events file, as the agent would write them:

- ``open`` of ``<sandbox>/ckpt/../../..(64 times)/<--host-file>``, made durable with an ``fsync`` and then truncated
  with a kept copy (``--payload`` bytes, in the agent's own keep folder): the rebuild would write the kept bytes
  into the host file;
- ``symlink ckpt/evil -> <--project>``, then ``open`` of ``ckpt/evil/victim.txt``: the rebuild would make the link
  and truncate the project's ``victim.txt`` through it;
- one ``write`` whose offset is 2**80 and one ``fsync`` whose size is a string: malformed.
"""

import argparse
import glob
import json
import os
import time

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--host-file", required=True)
p.add_argument("--project", required=True)
p.add_argument("--payload", default="PWNED BY THE JOB")


def forge(args):
    run_dir = os.environ.get("CHAOSCKPT_RUN_DIR")
    if not run_dir:
        return
    [events] = glob.glob(os.path.join(run_dir, f"events.*.{os.getpid()}.jsonl"))
    keep = os.path.join(run_dir, "keep")
    os.makedirs(keep, exist_ok=True)
    with open(os.path.join(keep, "payload"), "wb") as f:
        f.write(args.payload.encode())
    ckpt = os.path.join(os.getcwd(), "ckpt")
    escape = os.path.join(ckpt, *[".."] * 64, args.host_file.lstrip("/"))
    size = len(args.payload)
    ops = [
        {"op": "open", "path": escape, "ino": [1, 4242], "created": True, "trunc": True, "size": 0, "keep": None},
        {"op": "fsync", "path": escape, "ino": [1, 4242], "size": size},
        {"op": "open", "path": escape, "ino": [1, 4242], "created": False, "trunc": True, "size": 0,
         "keep": os.path.join(keep, "payload")},
        {"op": "symlink", "path": os.path.join(ckpt, "evil"), "target": args.project, "ino": [1, 4343]},
        {"op": "open", "path": os.path.join(ckpt, "evil", "victim.txt"), "ino": [1, 4444], "created": False,
         "trunc": True, "size": 0, "keep": None},
        {"op": "write", "path": os.path.join(ckpt, "last.pt"), "ino": [1, 4545], "off": 2**80, "len": 1},
        {"op": "fsync", "path": os.path.join(ckpt, "last.pt"), "ino": [1, 4545], "size": "huge"},
    ]
    with open(events, "a") as f:
        for n, op in enumerate(ops, 1000001):
            f.write(json.dumps({"v": 1, "t": "op", "ts": time.time(), "pid": os.getpid(), "n": n, **op}) + "\n")


def save(state):
    with open("ckpt/last.pt.tmp", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace("ckpt/last.pt.tmp", "ckpt/last.pt")
    fd = os.open("ckpt", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main():
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(16, 4, generator=g)
    y = x.sum(1, keepdim=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs("ckpt", exist_ok=True)
    start = 0
    if os.path.exists("ckpt/last.pt"):
        ck = torch.load("ckpt/last.pt")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = ck["epoch"] + 1
    for epoch in range(start, args.epochs):
        for i in range(0, len(x), 8):
            loss = ((model(x[i:i + 8]) - y[i:i + 8]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch})
        if epoch == 0:
            forge(args)


if __name__ == "__main__":
    main()
