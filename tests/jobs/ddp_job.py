"""A configurable DDP job (gloo, CPU) for multi-rank tests: each flag removes one piece of robustness.

Checkpoints are saved after every epoch, atomically (temporary file, fsync, rename):
``--ckpt rank0`` writes one shared ckpt/last.pt from rank 0; ``--ckpt per-rank`` has
every rank keep ckpt/rank<R>-epoch<E>.pt files of its own, and on resume the ranks
either agree on the newest epoch all of them have (``--resume agree``) or each loads
its own newest file (``--resume own``). ``--node-local`` keeps each machine's files in a folder of its own,
ckpt/node<N> (torchrun's GROUP_RANK), as on node-local disks; ``--no-fsync-node N`` never fsyncs there.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--ckpt", choices=["rank0", "per-rank"], default="rank0")
p.add_argument("--resume", choices=["agree", "own"], default="agree")
p.add_argument("--no-epoch", action="store_true", help="the checkpoint holds the step but not the epoch")
p.add_argument("--no-set-epoch", action="store_true", help="never call sampler.set_epoch")
p.add_argument("--node-local", action="store_true", help="checkpoints in ckpt/node<GROUP_RANK>")
p.add_argument("--no-fsync-node", type=int, default=None, help="this node's saves are never fsynced")
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--samples", type=int, default=64)
p.add_argument("--batch", type=int, default=8)


def atomic_save(obj, path, sync=True):
    with open(path + ".tmp", "wb") as f:
        torch.save(obj, f)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def newest_own_epoch(folder, rank):
    """The newest epoch this rank has a file of, or -1."""
    prefix = f"rank{rank}-epoch"
    epochs = [int(n[len(prefix):-3]) for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".pt")]
    return max(epochs, default=-1)


def main():
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(args.samples, 8, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    total_steps = args.epochs * len(loader)
    node = int(os.environ.get("GROUP_RANK", "0"))
    folder = f"ckpt/node{node}" if args.node_local else "ckpt"
    sync = args.no_fsync_node != node
    os.makedirs(folder, exist_ok=True)
    dist.barrier()

    if args.ckpt == "rank0":
        path = f"{folder}/last.pt" if os.path.exists(f"{folder}/last.pt") else None
    else:
        newest = torch.tensor([newest_own_epoch(folder, rank)])
        if args.resume == "agree":
            dist.all_reduce(newest, op=dist.ReduceOp.MIN)
        path = f"{folder}/rank{rank}-epoch{int(newest)}.pt" if int(newest) >= 0 else None
    epoch, step = 0, 0
    if path is not None:
        ck = torch.load(path)
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["torch"])
        step = ck["step"]
        if not args.no_epoch:
            epoch = ck["epoch"] + 1

    while step < total_steps:
        if not args.no_set_epoch:
            sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = ((model(xb) - yb) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        state = {"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step, "torch": torch.get_rng_state()}
        if not args.no_epoch:
            state["epoch"] = epoch
        if args.ckpt == "per-rank":
            atomic_save(state, f"{folder}/rank{rank}-epoch{epoch}.pt", sync)
        elif rank == 0:
            atomic_save(state, f"{folder}/last.pt", sync)
        epoch += 1
    dist.barrier()
    dist.destroy_process_group()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
