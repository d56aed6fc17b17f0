"""A job whose saver threads wait for a slow store before they write: a thread per save, handed a snapshot.

Every ``EVERY`` steps of ``STEPS`` the main thread copies its state (model and optimizer state dicts, torch's RNG
state, the step) and starts a thread named ``saver`` with it, which sleeps ``--delay`` seconds (0.5: a slow store
answering), then ``torch.save``s the snapshot to ``ckpt/last.pt.tmp``, fsyncs it, ``os.replace``s it over
``ckpt/last.pt`` and fsyncs the folder. The resume loads ``last.pt`` and restores model, optimizer, RNG state and
step, so a resumed run prints the uninterrupted run's losses.

By default (robust) each saver is a non-daemon thread the main thread joins before starting the next and at the
end, re-raising the error its save raised (a full disk stops the job). ``--daemon``: daemon threads nobody joins: the last save, handed over right at the end of training, is still
waiting for the store when the interpreter exits, so the final checkpoint never lands (slow_daemon_job.truth.md).
"""

import argparse
import copy
import os
import threading
import time

import torch
from torch import nn

STEPS = 24
EVERY = 6
WIDTH = 2048
STEP_PAUSE = 0.2
"""Seconds each step waits (a data loader's stand-in): six steps outlast a save's wait and write however fast the
machine, so every save but the last lands in --daemon (without it, a fast machine ends all 24 steps before the
first save has landed)."""

p = argparse.ArgumentParser()
p.add_argument("--daemon", action="store_true", help="daemon saver threads, never joined")
p.add_argument("--delay", type=float, default=0.5, help="seconds each saver waits before it writes")


def write(state, delay):
    """Wait for the store, then write the snapshot atomically: temporary file, fsync, rename, folder fsync."""
    time.sleep(delay)
    with open("ckpt/last.pt.tmp", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace("ckpt/last.pt.tmp", "ckpt/last.pt")
    dfd = os.open("ckpt", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    print(f"saved step {state['step']}", flush=True)


class Saver(threading.Thread):
    """One save: robust, it keeps its error for the main thread to raise after join(); daemon, it dies of it
    (threading prints the traceback) and nobody looks."""

    def __init__(self, state, delay, daemon):
        super().__init__(name="saver", daemon=daemon)
        self.state, self.delay, self.error = state, delay, None

    def run(self):
        try:
            write(self.state, self.delay)
        except BaseException as e:
            if self.daemon:
                raise
            self.error = e

    def wait(self):
        self.join()
        if self.error is not None:
            raise self.error


def main():
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    os.makedirs("ckpt", exist_ok=True)
    step = 0
    if os.path.exists("ckpt/last.pt"):
        state = torch.load("ckpt/last.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        torch.set_rng_state(state["rng"])
        step = state["step"]
        print(f"resumed from ckpt/last.pt at step {step}", flush=True)
    saver = None
    while step < STEPS:
        x = torch.randn(64, 16)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(STEP_PAUSE)
        step += 1
        print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step % EVERY == 0:
            if saver is not None and not args.daemon:
                saver.wait()
            snapshot = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(),
                                      "rng": torch.get_rng_state(), "step": step})
            saver = Saver(snapshot, args.delay, args.daemon)
            saver.start()
    if not args.daemon:
        saver.wait()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
