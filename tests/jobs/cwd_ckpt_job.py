"""A job whose checkpoint folder is its working directory: ``last.pt`` lies beside the script and the data.

Before training, a data-preparation step run as a separate process (this script with ``--prep``) writes
``data.bin`` (float32 rows, in 128-byte chunks) and ``data.json`` when they are missing; the job then trains 3 epochs
and saves its whole state after each: by default atomically (``last.pt.tmp``, fsync, ``os.replace``, folder
fsync); ``--naive`` ``torch.save``s straight over ``last.pt`` with no fsync. It resumes from ``last.pt``.

``CWD_PAUSE_IN_SAVE=SECONDS`` (for killing it by hand) pauses inside the second save, after the temporary file
is written and before it is renamed (atomic), or after half of ``last.pt`` is written (naive)."""

import json
import os
import random
import subprocess
import sys
import time

import torch
from torch import nn

EPOCHS = 3
ROWS, COLS = 64, 8


def prep():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(ROWS, COLS, generator=g)
    data = x.numpy().tobytes()
    with open("data.bin", "wb") as f:
        for start in range(0, len(data), 128):
            f.write(data[start:start + 128])
            f.flush()
    with open("data.json", "w") as f:
        json.dump({"rows": ROWS, "cols": COLS}, f)


def load_data():
    if not (os.path.exists("data.bin") and os.path.exists("data.json")):
        subprocess.run([sys.executable, os.path.abspath(__file__), "--prep"], check=True)
    with open("data.json") as f:
        shape = json.load(f)
    with open("data.bin", "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(shape["rows"], shape["cols"])


def pause(epoch):
    seconds = float(os.environ.get("CWD_PAUSE_IN_SAVE", "0"))
    if seconds and epoch == 1:
        print("paused in the save", flush=True)
        time.sleep(seconds)


def save_atomic(state, epoch):
    with open("last.pt.tmp", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    pause(epoch)
    os.replace("last.pt.tmp", "last.pt")
    fd = os.open(".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_naive(state, epoch):
    if os.environ.get("CWD_PAUSE_IN_SAVE"):
        import io

        buf = io.BytesIO()
        torch.save(state, buf)
        with open("last.pt", "wb") as f:
            f.write(buf.getbuffer()[: len(buf.getbuffer()) // 2])
            f.flush()
            pause(epoch)
            f.write(buf.getbuffer()[len(buf.getbuffer()) // 2:])
        return
    torch.save(state, "last.pt")


def main():
    naive = "--naive" in sys.argv
    torch.manual_seed(0)
    random.seed(0)
    x = load_data()
    y = x.sum(1, keepdim=True)
    model = nn.Sequential(nn.Linear(COLS, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if os.path.exists("last.pt"):
        ck = torch.load("last.pt")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["torch"])
        random.setstate(ck["python"])
        start = ck["epoch"] + 1
        print(f"resumed from last.pt at epoch {start}", flush=True)
    for epoch in range(start, EPOCHS):
        total = 0.0
        for rows in torch.randperm(len(x)).split(8):
            loss = ((model(x[rows] + 0.01 * random.random()) - y[rows]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / 8:.4f}", flush=True)
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch,
                 "torch": torch.get_rng_state(), "python": random.getstate()}
        (save_naive if naive else save_atomic)(state, epoch)
    print("finished", flush=True)


if __name__ == "__main__":
    if "--prep" in sys.argv:
        prep()
    else:
        main()
