"""A small Lightning job: ModelCheckpoint(save_last=True) every epoch, resumed with fit(ckpt_path="last").

Tiny model, synthetic data, CPU, deterministic. Lightning restores the model, the optimizer and the loop's
position; it does not save the DataLoader's generator or the global torch stream, so a shuffling loader
(the default here) or dropout (--dropout) diverges after a resume; --no-shuffle removes the randomness.
Each epoch saves twice: ``epoch=E-step=S.ckpt``, then ``last.ckpt``; a kill in the first epoch's
``last.ckpt`` save leaves no ``last.ckpt``, and ``fit(ckpt_path="last")`` then starts from scratch.
"""

import argparse
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--dropout", type=float, default=0.0, help="draw from the global torch stream in every step")
p.add_argument("--ckpt-dir", default="ckpt")
p.add_argument("--no-shuffle", action="store_true", help="read the rows in one fixed order: no random stream to restore")
p.add_argument("--tmpdir", help="where fsspec writes its temporary file; on another file system, its move onto "
                                "last.ckpt becomes a copy over it")


class Net(L.LightningModule):
    def __init__(self, dropout):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 1))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    args = p.parse_args()
    if args.tmpdir:
        tempfile.tempdir = args.tmpdir
    L.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    loader = DataLoader(data, batch_size=16, shuffle=not args.no_shuffle, generator=torch.Generator().manual_seed(0))
    trainer = L.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True,
        callbacks=[ModelCheckpoint(dirpath=args.ckpt_dir, save_last=True, every_n_epochs=1)],
    )
    trainer.fit(Net(args.dropout), loader, ckpt_path="last")


if __name__ == "__main__":
    main()
