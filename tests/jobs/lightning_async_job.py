"""A Lightning job whose checkpoints are written on a background thread: ``plugins=[AsyncCheckpointIO(...)]``.

ModelCheckpoint(save_last=True) every epoch, resumed with ``fit(ckpt_path="last")``. Each epoch end submits two
saves to AsyncCheckpointIO's one-worker ThreadPoolExecutor, ``epoch=E-step=S.ckpt`` then ``last.ckpt``, and returns
at once: the worker thread serializes and writes them (through a temporary file and a move, as TorchCheckpointIO
does) while the main thread trains the next epoch's steps. ModelCheckpoint (save_top_k=1) removes the previous
``epoch=...ckpt`` on the main thread right after submitting the new one, before the worker has written it.
A 1024-wide hidden layer and SGD momentum make each checkpoint about 8.5 MB, long enough to write that the
following steps overlap it. No shuffling, no dropout, ``self.train()`` every epoch: a resume from any complete
checkpoint reproduces the uninterrupted losses; only the async save can break it. Prints ``step N loss L`` per step.

``LIGHTNING_ASYNC_PAUSE_IN_SAVE=SECONDS`` (for killing it by hand) makes the worker sleep at the start of save number
``LIGHTNING_ASYNC_PAUSE_AT`` (default 4: the second epoch's ``last.ckpt``; 3 is its ``epoch=1-step=16.ckpt``),
printing ``paused in the save of NAME``; the main thread trains on meanwhile.
"""

import argparse
import os
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--ckpt-dir", default="ckpt")
p.add_argument("--hidden", type=int, default=1024, help="width of the hidden layer: the checkpoint's size")
p.add_argument("--tmpdir", help="where fsspec writes its temporary file; on another file system, its move onto "
                                "the checkpoint becomes a copy over it")


class PausingCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO that can sleep at the start of one save (on the thread that runs it), for a hand kill."""

    def __init__(self):
        super().__init__()
        self.saves = 0

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.saves += 1
        pause = os.environ.get("LIGHTNING_ASYNC_PAUSE_IN_SAVE")
        if pause and self.saves == int(os.environ.get("LIGHTNING_ASYNC_PAUSE_AT", "4")):
            print(f"paused in the save of {os.path.basename(path)}", flush=True)
            time.sleep(float(pause))
        super().save_checkpoint(checkpoint, path, storage_options)


class Net(L.LightningModule):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.001, momentum=0.9)

    def on_train_epoch_start(self):
        self.train()


class PrintLoss(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        print(f"step {trainer.global_step} loss {outputs['loss'].item():.6f}", flush=True)


def main():
    args = p.parse_args()
    if args.tmpdir:
        tempfile.tempdir = args.tmpdir
    L.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(128, 8, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=False)
    trainer = L.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True, plugins=[AsyncCheckpointIO(PausingCheckpointIO())],
        callbacks=[ModelCheckpoint(dirpath=args.ckpt_dir, save_last=True, every_n_epochs=1), PrintLoss()],
    )
    trainer.fit(Net(args.hidden), loader, ckpt_path="last")
    print("finished", flush=True)


if __name__ == "__main__":
    main()
