"""A small Accelerate job: save_state every few steps with automatic checkpoint naming and total_limit,
resumed with load_state().

Tiny model, synthetic data, CPU, deterministic. Accelerate deletes the oldest folder *before* writing the
new one, so with ``--total-limit 1`` a kill in a save leaves no complete checkpoint; ``load_state()`` takes
the newest folder whether complete or not. ``--total-limit 2 --resume-complete`` (the robust configuration)
keeps the previous checkpoint while the new one is written and resumes from the newest folder whose
last file (the custom state, ``custom_checkpoint_0.pkl``) exists, removing the incomplete one.
``--eval after-save`` evaluates right after each ``save_state``: the RNG state it saved misses the evaluation's
draws (``--eval before-save`` evaluates first). A resume mid-epoch makes a new iterator through
``skip_first_batches``, which draws its seed from torch's stream unless the DataLoader has its own generator
(``--loader-generator``).
"""

import argparse
import glob
import os
import shutil

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--every", type=int, default=4)
p.add_argument("--total-limit", type=int, default=1)
p.add_argument("--resume-complete", action="store_true", help="resume from the newest complete checkpoint folder")
p.add_argument("--eval", choices=["none", "after-save", "before-save"], default="none",
               help="train with dropout and evaluate on a shuffled loader at every checkpoint, after or before "
                    "save_state: after it, the saved RNG state misses the evaluation's draws")
p.add_argument("--loader-generator", action="store_true",
               help="give the training DataLoader its own generator: the iterator skip_first_batches makes on "
                    "resume then draws its seed from it, not from torch's stream")


class Progress:
    def __init__(self):
        self.step = 0

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = state["step"]


def evaluate(model, loader):
    """A validation pass: its shuffled loader draws a seed from torch's stream."""
    model.eval()
    with torch.no_grad():
        loss = sum(float(torch.nn.functional.mse_loss(model(xb), yb)) for xb, yb in loader)
    model.train()
    print(f"eval loss {loss:.4f}", flush=True)


def main():
    args = p.parse_args()
    set_seed(0)
    config = ProjectConfiguration(project_dir=".", automatic_checkpoint_naming=True, total_limit=args.total_limit)
    accelerator = Accelerator(cpu=True, project_config=config)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 8, generator=g)
    own = torch.Generator().manual_seed(7) if args.loader_generator else None
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8, shuffle=False, generator=own)
    dropout = [torch.nn.Dropout(0.1)] if args.eval != "none" else []
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), *dropout, torch.nn.Linear(16, 1))
    eval_loader = DataLoader(TensorDataset(x[:64], x[:64].sum(1, keepdim=True)), batch_size=16, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    folders = sorted(glob.glob("checkpoints/checkpoint_*"), key=lambda f: int(f.rsplit("_", 1)[1]))
    if args.resume_complete:
        complete = [f for f in folders if os.path.exists(os.path.join(f, "custom_checkpoint_0.pkl"))]
        for f in folders:
            if f not in complete:
                shutil.rmtree(f)  # an interrupted save: its number is reused
        folders = complete
    if folders:
        accelerator.load_state(folders[-1])
        accelerator.project_configuration.iteration = int(folders[-1].rsplit("_", 1)[1]) + 1
    batches = accelerator.skip_first_batches(loader, progress.step) if progress.step else loader
    for xb, yb in batches:
        if progress.step >= args.steps:
            break
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        progress.step += 1
        if progress.step % args.every == 0:
            if args.eval == "before-save":
                evaluate(model, eval_loader)
            accelerator.save_state()
            if args.eval == "after-save":
                evaluate(model, eval_loader)


if __name__ == "__main__":
    main()
