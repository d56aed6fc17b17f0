"""A small Hugging Face Trainer job: save_steps, save_total_limit, resumed with resume_from_checkpoint=True.

A one-layer GPT-2 built from a config (nothing downloaded), synthetic token rows, CPU, deterministic.
Each checkpoint-N/ holds model.safetensors, optimizer.pt, scheduler.pt, rng_state.pth, training_args.bin
and trainer_state.json; no file is fsynced. ``resume_from_checkpoint=True`` takes the highest-numbered
folder without checking it is complete: a kill in checkpoint-8 leaves a checkpoint-8 the resume crashes
on while checkpoint-4 is complete. ``--resume-complete`` picks the newest folder whose trainer_state.json
exists (the Trainer writes it last): the robust configuration.
"""

import argparse
import glob
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--save-steps", type=int, default=4)
p.add_argument("--resume-complete", action="store_true", help="resume from the newest complete checkpoint")


class Rows(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1234)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def newest(folders):
    return max(folders, key=lambda f: int(f.rsplit("-", 1)[1])) if folders else None


def main():
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    training = TrainingArguments(
        output_dir="out", max_steps=args.steps, save_steps=args.save_steps, save_total_limit=2,
        per_device_train_batch_size=4, learning_rate=1e-3, logging_strategy="no", report_to=[],
        use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True,
    )
    folders = glob.glob("out/checkpoint-*")
    if args.resume_complete:
        resume = newest([f for f in folders if os.path.exists(os.path.join(f, "trainer_state.json"))])
    else:
        resume = True if folders else None
    Trainer(model=model, args=training, train_dataset=Rows(64)).train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main()
