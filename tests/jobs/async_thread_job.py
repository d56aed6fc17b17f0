"""A job with a hand-written asynchronous checkpointer: a background thread writes while the main thread trains on.

Every ``EVERY`` steps the main thread snapshots its state (model and optimizer state dicts, torch's RNG state, the
step) by ``torch.save``-ing it into memory, and hands the bytes to one background thread, which writes them to
``ckpt/last.pt.tmp`` in 1 MiB writes, fsyncs it, ``os.replace``s it over ``ckpt/last.pt`` and fsyncs the folder.
Until that rename ``last.pt`` is the previous checkpoint, whole. The resume loads ``last.pt`` and restores the
model, the optimizer, torch's RNG state and the step, so a resumed run prints the uninterrupted run's losses.

By default (robust) the saver is a non-daemon thread: the main thread waits for the previous save before handing
over the next one and at the end, and re-raises the exception a save raised (a full disk stops the job with the
error). ``--daemon``: the saver is a daemon thread nobody waits for, whose exception nobody looks at (threading
prints the traceback, the job trains on), and the last save is handed over right at the end of training: the
process exits while it is still being written, so the final checkpoint never lands.

The main thread serializes because a daemon thread stopped by the interpreter's exit inside ``torch.save`` aborts
the process (SIGABRT); stopped in a plain file write, it exits cleanly (async_thread_job.truth.md).

``--pause-after-handoff``: the main thread sleeps 0.5 s after each hand-over, so the saver has written, renamed
and fsynced the checkpoint before the next step begins (as a loaded machine makes it now and then).

``--serialize-in-thread``: the main thread hands over a copy of the state and the saver thread ``torch.save``s it
into the temporary file itself; with ``--daemon``, the interpreter's exit stops the thread inside torch's writer and
the process most often dies of SIGABRT after its script has ended (async_thread_job.truth.md).

``--keep-saving`` (with ``--daemon``): the saver prints a failed save's traceback and goes on with the next one, as
a logging saver does; the job still never learns of the failure.

``ASYNC_PAUSE_IN_SAVE=SECONDS`` (for killing it by hand) pauses the second save's thread once it has written 1 MiB
of ``last.pt.tmp``, while the main thread trains on."""

import copy
import io
import os
import queue
import sys
import threading
import time
import traceback

import torch
from torch import nn

STEPS = 24
EVERY = 6
WIDTH = 2048
CHUNK = 2 ** 20


def write(data, step):
    """Write one serialized snapshot atomically: temporary file, fsync, rename over last.pt, folder fsync."""
    pause = os.environ.get("ASYNC_PAUSE_IN_SAVE") if step == 2 * EVERY else None
    with open("ckpt/last.pt.tmp", "wb") as f:
        if isinstance(data, dict):
            torch.save(data, f)
        for offset in range(0, len(data) if isinstance(data, memoryview) else 0, CHUNK):
            if pause and offset == CHUNK:
                print("paused in the save", flush=True)
                time.sleep(float(pause))
            f.write(data[offset:offset + CHUNK])
        f.flush()
        os.fsync(f.fileno())
    os.replace("ckpt/last.pt.tmp", "ckpt/last.pt")
    dfd = os.open("ckpt", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class Saver:
    """One background thread writing the snapshots it is handed, in order. Robust: the main thread waits for the
    previous save before handing the next and at the end, and re-raises its error. Daemon: nobody waits, and an
    error ends the thread (threading prints it) while the job trains on."""

    def __init__(self, daemon):
        self.daemon, self.error = daemon, None
        self.queue = queue.Queue()
        threading.Thread(target=self.work, name="saver", daemon=daemon).start()

    def work(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            try:
                write(*item)
            except BaseException as e:
                if self.daemon and "--keep-saving" in sys.argv:
                    traceback.print_exc()
                    continue
                if self.daemon:
                    raise
                self.error = e
            finally:
                self.queue.task_done()

    def start(self, data, step):
        self.wait()
        self.queue.put((data, step))
        if "--pause-after-handoff" in sys.argv:
            time.sleep(0.5)

    def wait(self):
        if self.daemon:
            return
        self.queue.join()
        if self.error is not None:
            raise self.error

    def stop(self):
        """Let the thread end once the saves handed to it are written (even when the main thread failed)."""
        self.queue.put(None)


def snapshot(model, opt, step):
    """The state at this step, serialized into memory before the next step changes it (or, with
    ``--serialize-in-thread``, copied for the saver thread to serialize)."""
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "step": step}
    if "--serialize-in-thread" in sys.argv:
        return copy.deepcopy(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getbuffer()


def main():
    saver = Saver("--daemon" in sys.argv)
    try:
        train(saver)
    finally:
        saver.stop()


def train(saver):
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
    while step < STEPS:
        x = torch.randn(64, 16)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step % EVERY == 0:
            saver.start(snapshot(model, opt, step), step)
    saver.wait()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
