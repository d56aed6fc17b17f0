"""A configurable training job for end-to-end tests: each flag removes or adds one piece of robustness."""

import argparse
import atexit
import ctypes
import io
import os
import random
import shutil
import sys
import time

if "--abort-at-exit" in sys.argv:  # registered before torch is imported, so it runs after every other exit handler
    atexit.register(os.abort)

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--save", default="atomic",
               choices=["atomic", "atomic-nodirsync", "rename-nofsync", "inplace", "fileobj-inplace", "delete-first", "dcp"])
p.add_argument("--catch", action="store_true", help="carry on when a save fails")
p.add_argument("--train-call", action="store_true", help="call model.train() at the start of every epoch")
p.add_argument("--numpy", action="store_true", help="augment with numpy's global random state too")
p.add_argument("--bloat", action="store_true", help="save a 10-element slice of a 1M-element buffer")
p.add_argument("--native-write", action="store_true", help="also write ckpt/extra.bin through libc, unseen by Python")
p.add_argument("--copy-best", action="store_true", help="copy each checkpoint to best.pt with shutil.copyfile")
p.add_argument("--restore", default="torch,python,loader,numpy", help="random streams the checkpoint restores")
p.add_argument("--eval", choices=["none", "after-save", "before-save"], default="none",
               help="after each epoch, evaluate on a random subset (drawing from torch's stream) after or before "
                    "the save: after it, the checkpoint's RNG state is captured before the evaluation's draws")
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--samples", type=int, default=64)
p.add_argument("--workers", type=int, default=0)
p.add_argument("--mp-context", default=None)
p.add_argument("--resume-from", choices=["newest", "oldest", "none"], default="newest")
p.add_argument("--seed", default="0", help="an integer, or 'time' for a job that is not deterministic")
p.add_argument("--fail", action="store_true", help="exit 1 before training")
p.add_argument("--sleep", type=float, default=0.0, help="sleep this long before training")
p.add_argument("--resume-flag", action="store_true", help="resume only when --resumed is given too")
p.add_argument("--resumed", action="store_true")
p.add_argument("--nan", action="store_true", help="a loss that is NaN from the first step")
p.add_argument("--abort-at-exit", action="store_true",
               help="die by SIGABRT after the script ends, as a native library crashing in its teardown does")
p.add_argument("--fail-save-after-resume", action="store_true",
               help="after resuming, a save renames a temporary file that is not there (as two ranks racing do)")


class Data(Dataset):
    """Synthetic rows; a worker that saves in __getitem__ must not be recorded as the job's save."""

    def __init__(self, n, save_in_worker):
        self.save_in_worker = save_in_worker
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x.sum(1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.save_in_worker:
            torch.save(self.x[i].clone(), io.BytesIO())
        return self.x[i], self.y[i]


def main():
    args = p.parse_args()

    if args.fail:
        sys.exit("job failed on purpose")
    time.sleep(args.sleep)

    seed = int(time.time_ns() % 100000) if args.seed == "time" else int(args.seed)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    big = torch.zeros(1_000_000)
    loader_gen = torch.Generator().manual_seed(seed)
    data = Data(args.samples, args.workers > 0)
    loader = DataLoader(data, batch_size=8, shuffle=True, generator=loader_gen,
                        num_workers=args.workers, multiprocessing_context=args.mp_context)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    restore = set(filter(None, args.restore.split(",")))

    os.makedirs("ckpt", exist_ok=True)


    def ckpt_path(epoch):
        return "ckpt/last.pt" if args.resume_from != "oldest" else f"ckpt/epoch{epoch}.pt"


    def fsync_dir(directory):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def save(obj, path):
        if args.fail_save_after_resume and start > 0:
            os.replace(path + ".tmp", path)  # the other rank already renamed it: FileNotFoundError
        if args.save == "inplace":
            torch.save(obj, path)
        elif args.save == "fileobj-inplace":
            with open(path, "wb") as f:
                torch.save(obj, f)
        elif args.save == "delete-first":
            if os.path.exists(path):
                os.remove(path)
            torch.save(obj, path)
        elif args.save == "dcp":
            import torch.distributed.checkpoint as dcp

            dcp.save({"model": obj["model"], "epoch": torch.tensor(obj["epoch"])}, checkpoint_id="ckpt/dcp")
        else:
            with open(path + ".tmp", "wb") as f:
                torch.save(obj, f)
                f.flush()
                if args.save != "rename-nofsync":
                    os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
            if args.save == "atomic":
                fsync_dir(os.path.dirname(path))
        if args.native_write:
            libc = ctypes.CDLL(None)
            fd = libc.open(b"ckpt/extra.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            libc.write(fd, b"native bytes", 12)
            libc.close(fd)
        if args.copy_best:
            shutil.copyfile(path, os.path.join(os.path.dirname(path), "best.pt"))

    def save_or_carry_on(obj, path):
        try:
            save(obj, path)
        except (OSError, RuntimeError) as exc:
            if not args.catch:
                raise
            print(f"save failed, carrying on: {exc}", flush=True)

    def evaluate():
        rows = torch.randperm(len(data))[:16]
        with torch.no_grad():
            x, y = data.x[rows], data.y[rows]
            print(f"eval loss {float(((model(x) - y) ** 2).mean()):.4f}", flush=True)

    start = 0
    candidates = sorted(f for f in os.listdir("ckpt") if f.endswith(".pt"))
    may_resume = args.resume_from != "none" and (args.resumed or not args.resume_flag)
    if args.save == "dcp" and os.path.exists("ckpt/dcp/.metadata") and may_resume:
        import torch.distributed.checkpoint as dcp

        state = {"model": model.state_dict(), "epoch": torch.tensor(0)}
        dcp.load(state, checkpoint_id="ckpt/dcp")
        model.load_state_dict(state["model"])
        start = int(state["epoch"]) + 1
    elif candidates and may_resume and os.path.exists(os.path.join("ckpt", candidates[0])):
        ck = torch.load(os.path.join("ckpt", candidates[0] if args.resume_from == "oldest" else "last.pt"),
                        weights_only=not args.numpy)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        if "torch" in restore:
            torch.set_rng_state(ck["torch"])
        if "python" in restore:
            random.setstate(ck["python"])
        if "numpy" in restore and "numpy" in ck:
            np.random.set_state(ck["numpy"])
        if "loader" in restore:
            loader_gen.set_state(ck["loader"])
        start = ck["epoch"] + 1

    for epoch in range(start, args.epochs):
        if args.train_call:
            model.train()
        for x, y in loader:
            x = x + 0.01 * random.random()
            if args.numpy:
                x = x + 0.01 * float(np.random.randn())
            loss = ((model(x) - y) ** 2).mean()
            if args.nan:
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            opt.step()
        if args.eval == "before-save":
            evaluate()
        save_or_carry_on({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "torch": torch.get_rng_state(),
              "python": random.getstate(), "loader": loader_gen.get_state(),
              **({"numpy": np.random.get_state()} if args.numpy else {}),
              **({"head": big[:10]} if args.bloat else {})}, ckpt_path(epoch))
        if args.eval == "after-save":
            evaluate()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
