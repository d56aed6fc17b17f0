"""chaosckpt's own memory and time on hostile input (issue 16), each next to a baseline taken in the same run.

    python bench/bench_selfchaos.py                      # full sizes: 1 GiB bomb, 2 GB of stderr, 1M levels
    python bench/bench_selfchaos.py --noise-gb 0.2       # a smaller stderr flood

(a) peak memory of ``chaosckpt audit`` on a torch zip whose data.pkl inflates to 1 GiB (a 1 MB file), next to
    its peak on a plain checkpoint (goal < 300 MB);
(b) peak memory of the ``chaosckpt run`` process while the job writes 2 GB to stderr, next to the same job
    writing nothing (goal < 300 MB);
(c) time of ``chaosckpt audit`` on a pickle nested 1M levels deep, next to a one-key pickle (goal < 5 s).
Peak memory is the process's resident set, sampled every 10 ms with psutil.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JOB = """
import os, sys, torch
noise = int(sys.argv[1])
block = b"x" * 1023 + b"\\n"
buf = block * 1024
written = 0
while written < noise:
    os.write(2, buf)
    written += len(buf)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
start = 0
if os.path.exists("ckpt.pt"):
    ck = torch.load("ckpt.pt")
    model.load_state_dict(ck["model"]); opt.load_state_dict(ck["opt"]); start = ck["epoch"] + 1
for epoch in range(start, 3):
    for _ in range(4):
        loss = model(torch.ones(2, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, "ckpt.tmp")
    os.replace("ckpt.tmp", "ckpt.pt")
"""


def peak(argv, cwd) -> "tuple[float, float, int]":
    """Peak resident MB of the process ``argv`` starts (not its children), its wall time, its exit status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ps = psutil.Process(proc.pid)
    top = 0
    while proc.poll() is None:
        try:
            top = max(top, ps.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.01)
    return top / 1e6, time.perf_counter() - start, proc.returncode


def bomb(path: Path, inflated: int) -> None:
    """A torch.save-shaped zip whose data.pkl is one BINBYTES8 of ``inflated`` zero bytes, deflated."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("bomb/data.pkl", "w", force_zip64=True) as out:
            out.write(b"\x80\x04\x8e" + inflated.to_bytes(8, "little"))
            chunk = bytes(1 << 24)
            left = inflated
            while left:
                out.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
            out.write(b".")


def chaosckpt(*args: str) -> list:
    return [sys.executable, "-m", "chaosckpt", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bomb-gib", type=float, default=1.0)
    parser.add_argument("--noise-gb", type=float, default=2.0)
    parser.add_argument("--levels", type=int, default=1_000_000)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        import torch

        torch.save({"w": torch.zeros(4), "step": 1}, tmp / "plain.pt")
        bomb(tmp / "bomb.pt", int(opts.bomb_gib * (1 << 30)))
        base_mb, _, _ = peak(chaosckpt("audit", str(tmp / "plain.pt")), tmp)
        bomb_mb, bomb_s, rc = peak(chaosckpt("audit", str(tmp / "bomb.pt")), tmp)
        print(f"(a) audit of a {(tmp / 'bomb.pt').stat().st_size / 1e6:.1f} MB zip inflating to {opts.bomb_gib:g} GiB: "
              f"peak {bomb_mb:.0f} MB in {bomb_s:.1f} s, exit {rc} (plain checkpoint: {base_mb:.0f} MB); goal < 300 MB")

        project = tmp / "project"
        project.mkdir()
        (project / "train.py").write_text(JOB)
        quiet_mb, quiet_s, _ = peak(chaosckpt("run", "-s", "kill9-mid-save", "--out", str(tmp / "r0"), "--",
                                              "train.py", "0"), project)
        noise = int(opts.noise_gb * 1e9)
        loud_mb, loud_s, rc = peak(chaosckpt("run", "-s", "kill9-mid-save", "--out", str(tmp / "r1"), "--",
                                             "train.py", str(noise)), project)
        logs = sum(p.stat().st_size for p in (tmp / "r1").rglob("*.log"))
        print(f"(b) run of a job writing {opts.noise_gb:g} GB to stderr in each of its runs: peak {loud_mb:.0f} MB "
              f"in {loud_s:.1f} s, exit {rc}, logs {logs / 1e6:.1f} MB on disk (silent job: {quiet_mb:.0f} MB in "
              f"{quiet_s:.1f} s); goal < 300 MB")

        (tmp / "deep.pkl").write_bytes(b"\x80\x02" + b"]" * opts.levels + b"a" * (opts.levels - 1) + b".")
        (tmp / "tiny.pkl").write_bytes(b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s.")
        _, tiny_s, _ = peak(chaosckpt("audit", str(tmp / "tiny.pkl")), tmp)
        deep_mb, deep_s, rc = peak(chaosckpt("audit", str(tmp / "deep.pkl")), tmp)
        print(f"(c) audit of a pickle nested {opts.levels} levels: {deep_s:.1f} s, peak {deep_mb:.0f} MB, exit {rc} "
              f"(one-key pickle: {tiny_s:.1f} s, mostly importing torch); goal < 5 s")


if __name__ == "__main__":
    main()
