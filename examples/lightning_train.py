"""A Lightning job that survives being killed mid-save and resumes bit for bit.

Lightning's ModelCheckpoint writes each checkpoint through a temporary file and a move, and
``fit(ckpt_path="last")`` resumes from ``last.ckpt``. Two settings make that robust:
- ``save_last="link"``: ``last.ckpt`` is a link to the newest complete checkpoint, made after it is
  written. With ``save_last=True`` it is a second save, and a job killed during the first epoch's
  ``last.ckpt`` save finds none and starts from scratch although ``epoch=0-step=N.ckpt`` is complete;
- the random streams the loop draws from (the DataLoader's generator, torch's global stream for
  dropout) go into the checkpoint, through a callback: Lightning saves neither;
- ``self.train()`` at the start of every epoch: Lightning keeps the train/eval mode a module is in.

Run it under chaosckpt:  chaosckpt run examples/lightning_train.py --scenario kill9-mid-save
(needs ``pip install lightning``)
"""

import argparse

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_epoch_start(self):
        self.train()  # Lightning keeps the mode a module is in: one restored or validated in eval mode would stay so


class RandomStreams(Callback):
    """Saves and restores the loader's generator and torch's global stream with every checkpoint."""

    def __init__(self, loader_gen):
        self.loader_gen = loader_gen

    def on_save_checkpoint(self, trainer, module, checkpoint):
        checkpoint["rng"] = {"loader": self.loader_gen.get_state(), "torch": torch.get_rng_state()}

    def on_load_checkpoint(self, trainer, module, checkpoint):
        self.loader_gen.set_state(checkpoint["rng"]["loader"])
        torch.set_rng_state(checkpoint["rng"]["torch"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--ckpt-dir", default="ckpt")
    args = parser.parse_args()

    L.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    loader_gen = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=True, generator=loader_gen)
    trainer = L.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True,
        callbacks=[ModelCheckpoint(dirpath=args.ckpt_dir, save_last="link", every_n_epochs=1),
                   RandomStreams(loader_gen)],
    )
    trainer.fit(Net(), loader, ckpt_path="last")


if __name__ == "__main__":
    main()
