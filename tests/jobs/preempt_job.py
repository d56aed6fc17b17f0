"""A job that answers a preemption (SIGTERM, or the signal of ``--signal``) the way trainers do, in variants.

It trains ``STEPS`` steps of a small MLP on batches sliced from a fixed tensor by step (nothing random after the
start), printing ``step N loss X``, and every ``EVERY`` steps saves model, optimizer and step to ``ckpt/last.pt``
atomically: ``torch.save`` into memory, then ``WRITE`` bytes at a time into ``ckpt/last.pt.tmp``, fsync, rename,
fsync of the folder. Started again, it loads ``ckpt/last.pt`` when it exists and prints ``resumed from step N``.

``--handler`` says what the job does on the signal; but ``exit``, each handler only sets a flag, and the loop acts on
it at the end of the next step it takes, before that step's periodic save, as Lightning and hand-written handlers
do (a signal that lands in the save of step 16 is acted on after step 17):

- ``none``: no handler; the signal's default action ends the process where it stands.
- ``atomic``: save an emergency checkpoint of the step it stopped at, the periodic way (temporary name, fsync,
  rename), then exit 0.
- ``inplace``: save the emergency checkpoint straight over ``ckpt/last.pt`` (open, truncate, write), then exit 0.
- ``exit``: the handler itself exits 0 (``sys.exit(0)``) wherever the job stands, a save in progress included.
- ``ignore``: note the signal and train on.

``--slow S``: the emergency save sleeps S seconds after its first write (a slow store, a large state), so a grace
period shorter than S cuts it. Under torchrun (``--ddp``) every rank trains the same model on its own slice of
each batch (gradients averaged with gloo), agrees on the flag through an all-reduce at every step, and saves its
own file ``ckpt/rank<R>.pt`` (the emergency checkpoint included); rank 0 prints the losses."""

import argparse
import io
import os
import signal
import sys
import time

import torch
from torch import nn

STEPS = 30
EVERY = 8
WIDTH = 512
WRITE = 2 ** 18


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--handler", choices=("none", "atomic", "inplace", "exit", "ignore"), default="atomic")
    p.add_argument("--signal", default="SIGTERM")
    p.add_argument("--slow", type=float, default=0.0)
    p.add_argument("--ddp", action="store_true")
    return p.parse_args()


def fsync_dir(folder):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(state, path, atomic=True, slow=0.0):
    """Serialize ``state`` into memory and write it to ``path``: atomically (temporary name, fsync, rename, folder
    fsync) or straight over it; ``slow`` seconds of sleep after the first write."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    target = path + ".tmp" if atomic else path
    with open(target, "wb") as f:
        for offset in range(0, len(data), WRITE):
            f.write(data[offset:offset + WRITE])
            if slow and offset == 0:
                f.flush()
                time.sleep(slow)
        f.flush()
        os.fsync(f.fileno())
    if atomic:
        os.replace(target, path)
    fsync_dir(os.path.dirname(path))


def main():
    args = parse()
    rank, world = 0, 1
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    path = f"ckpt/rank{rank}.pt" if args.ddp else "ckpt/last.pt"
    os.makedirs("ckpt", exist_ok=True)

    stop = {"signal": False}
    if args.handler != "none":
        def on_signal(signum, frame):
            stop["signal"] = True
            print(f"rank {rank} got {signal.Signals(signum).name}", flush=True)
            if args.handler == "exit":
                sys.exit(0)
        signal.signal(getattr(signal, args.signal), on_signal)

    torch.manual_seed(0)
    torch.set_num_threads(1)  # one thread: the same sums in the same order in every run
    model = nn.Sequential(nn.Linear(16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randn(STEPS * 8, 16, generator=torch.Generator().manual_seed(1))
    target = data.sum(dim=1, keepdim=True)
    start = 0
    if os.path.exists(path):
        state = torch.load(path, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"resumed from step {start}", flush=True)

    def state(step):
        return {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}

    for step in range(start + 1, STEPS + 1):
        rows = slice((step - 1) * 8 + rank * 8 // world, (step - 1) * 8 + (rank + 1) * 8 // world)
        loss = nn.functional.mse_loss(model(data[rows]), target[rows])
        opt.zero_grad()
        loss.backward()
        if args.ddp:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        stopping = stop["signal"]
        if args.ddp:
            flag = torch.tensor([1.0 if stopping else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stopping = bool(flag.item())
        if stopping and args.handler == "ignore":
            stop["signal"] = False
            print(f"rank {rank} trains on after the signal", flush=True)
        elif stopping:
            if args.handler in ("atomic", "inplace"):
                save(state(step), path, atomic=args.handler == "atomic", slow=args.slow)
                print(f"rank {rank} saved an emergency checkpoint of step {step}", flush=True)
            sys.exit(0)
        if step % EVERY == 0:
            save(state(step), path)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
