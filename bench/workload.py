"""The workloads the benchmark times, run as a plain job with or without the agent injected.

``step``: mean optimizer-step time of a ~10M-parameter MLP on one thread.
``save``: throughput of torch.save(path) on a ~400 MB state dict.
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

if sys.argv[1] == "step":
    steps = int(sys.argv[2])
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 256))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(32, 1024)
    y = torch.randn(32, 256)
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
