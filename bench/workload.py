"""The workloads the benchmark times, run as a plain job with or without the agent injected.

``step``: mean optimizer-step time of a ~10M-parameter MLP on one thread.
``save``: throughput of torch.save(path) on a ~400 MB state dict.
``writers``: throughput of a checkpoint's other writers (open().write of ~400 MB in 1 MB writes, then a
shutil.copyfile of it) inside a checkpoint that a torch.save opened.
``async``: wall time of training steps of the ``step`` MLP that serialize the state into memory every 10 steps and
hand it to a saver thread, which writes it to a file (temporary name, fsync, rename) while the training goes on.
``import`` / ``bare``: import torch, or nothing; the caller times the whole process (start-up cost).
Prints one JSON object on stdout.
"""

import json
import os
import sys
import time

if sys.argv[1] in ("import", "bare"):
    if sys.argv[1] == "import":
        __import__("torch")
    print("{}")
    sys.exit(0)

import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(0)


def mlp():
    """The ~10M-parameter MLP both step workloads train, its optimizer, and one batch."""
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 256))
    return model, torch.optim.Adam(model.parameters(), lr=1e-4), torch.randn(32, 1024), torch.randn(32, 256)


if sys.argv[1] == "step":
    steps = int(sys.argv[2])
    model, opt, x, y = mlp()
    times = []
    for i in range(steps + 5):
        start = time.perf_counter()
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    times = sorted(times[5:])
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"step_s": times[len(times) // 2], "params": params}))

elif sys.argv[1] == "save":
    reps = int(sys.argv[2])
    state = {f"w{i}": torch.randn(5_000_000) for i in range(20)}  # 400 MB of float32
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    path = os.path.join(sys.argv[3], "bench.pt")
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        torch.save(state, path)
        times.append(time.perf_counter() - start)
        os.unlink(path)
    times.sort()
    print(json.dumps({"save_s": times[len(times) // 2], "bytes": nbytes}))

elif sys.argv[1] == "async":
    import io
    import queue
    import threading

    steps, folder = int(sys.argv[2]), sys.argv[3]
    model, opt, x, y = mlp()
    work: "queue.Queue" = queue.Queue()

    def saver():
        while (data := work.get()) is not None:
            tmp = os.path.join(folder, "async.pt.tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(folder, "async.pt"))

    thread = threading.Thread(target=saver)
    thread.start()
    start = time.perf_counter()
    for i in range(1, steps + 1):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % 10 == 0:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
            work.put(buf.getbuffer())
    elapsed = time.perf_counter() - start
    work.put(None)
    thread.join()
    print(json.dumps({"async_s": elapsed / steps}))

elif sys.argv[1] == "writers":
    import shutil

    reps = int(sys.argv[2])
    folder = sys.argv[3]
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    chunk = os.urandom(1 << 20)
    times = []
    for _ in range(reps):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()  # each round is a checkpoint of its own: a step, then its files
        torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
        start = time.perf_counter()
        with open(os.path.join(folder, "state.bin"), "wb") as f:
            for _ in range(400):
                f.write(chunk)
        shutil.copyfile(os.path.join(folder, "state.bin"), os.path.join(folder, "best.bin"))
        times.append(time.perf_counter() - start)
    times.sort()
    print(json.dumps({"writers_s": times[len(times) // 2]}))
