"""A trial's cost against the job's length, with the horizon (goals: <= 0.35 and <= 1.2).

    python bench/bench_horizon.py            # 4,000-step job: bare run; trials on 4,000 and 40,000 steps, 3 each
    python bench/bench_horizon.py --quick    # the 4,000-step figures only
    python bench/bench_horizon.py --end      # also the trial with --horizon end (every run to the job's end)

The job takes ~20 ms a step (a small model's step and a sleep), saves every 100 steps (atomically,
with its random state) and resumes from its checkpoint. The trial kills it in save 2 (step 200) with
horizon 50: the reference runs to step 250, the faulted run to its fault at step 200, the resume from
step 100 to step 150, about 500 steps of work and three interpreter start-ups, whatever the job's length.

Figures: the trial's wall time over one bare full run of the 4,000-step job (goal <= 0.35), and the
trial's wall time on a 40,000-step job over the same trial on the 4,000-step one (goal <= 1.2: the
cost does not grow with the job), as medians of ``--repeat`` trials of each length taken alternately.
Each trial starts with a cold project (no cached reference).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

JOB = textwrap.dedent("""
    import argparse, os, random, time
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--step-ms", type=float, default=20.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if os.path.exists("ckpt/last.pt"):
        state = torch.load("ckpt/last.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        torch.set_rng_state(state["rng"])
        start = state["step"]
    os.makedirs("ckpt", exist_ok=True)
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(16, 32)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_ms / 1000)
        if step % args.every == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "step": step}
            with open("ckpt/tmp.pt", "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace("ckpt/tmp.pt", "ckpt/last.pt")
""")


def project(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "train.py").write_text(JOB)
    return folder


def bare(folder: Path, steps: int) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "train.py", "--steps", str(steps)], cwd=folder, check=True)
    return time.monotonic() - started


def trial(folder: Path, steps: int, horizon: str) -> tuple:
    """Seconds a kill9-mid-save trial at save 2 takes, and its verdict."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "chaosckpt", "run", "train.py", "-s", "kill9-mid-save", "-p", "save=2",
         "--horizon", horizon, "--json", "--out", str(folder.parent / f"{folder.name}-results"), "--",
         "--steps", str(steps)],
        cwd=folder, capture_output=True, text=True, env=None,
    )
    took = time.monotonic() - started
    if proc.returncode not in (0, 1):
        sys.exit(f"the trial failed to run: {proc.stderr.strip()[-500:]}")
    doc = json.loads(proc.stdout)["trials"][0]
    return took, doc


def runs(doc: dict) -> str:
    return ", ".join(f"{r['name']} {r['duration_s']:.1f} s" for r in doc["runs"])


def median(values: list) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the 40,000-step trials")
    parser.add_argument("--end", action="store_true", help="also time the trial with --horizon end on 4,000 steps")
    parser.add_argument("--repeat", type=int, default=3, help="trials of each length, alternating (medians compared)")
    parser.add_argument("--horizon", default="50")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chaosckpt-bench-horizon-") as tmp:
        root = Path(tmp)
        full = bare(project(root, "bare"), 4000)
        print(f"bare run, 4,000 steps: {full:.1f} s", flush=True)
        times: dict = {4000: [], 40000: []}
        lengths = [4000] if args.quick else [4000, 40000]
        for i in range(args.repeat):
            for steps in lengths:
                took, doc = trial(project(root, f"trial-{steps}-{i}"), steps, args.horizon)
                times[steps].append(took)
                print(f"trial, {steps:,} steps, horizon {args.horizon}: {took:.1f} s ({runs(doc)}): {doc['headline']}",
                      flush=True)
        short = median(times[4000])
        print(f"trial / bare run: {short:.1f} / {full:.1f} s = {short / full:.3f}  (median of {args.repeat}; goal <= 0.35)")
        if not args.quick:
            long = median(times[40000])
            print(f"trial 40k / trial 4k: {long:.1f} / {short:.1f} s = {long / short:.3f}  (medians of {args.repeat}; goal <= 1.2)")
        if args.end:
            whole, doc = trial(project(root, "trial-end"), 4000, "end")
            print(f"trial, 4,000 steps, horizon end: {whole:.1f} s ({runs(doc)}): {doc['headline']}")
            print(f"trial (horizon end) / bare run: {whole / full:.3f}")


if __name__ == "__main__":
    main()
