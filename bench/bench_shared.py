"""A suite of trials faulting one save, with its faulted run shared and without (goal: well under 1).

    python bench/bench_shared.py                       # five kills, five power losses in save 2: shared, --no-share
    python bench/bench_shared.py --fault power-loss    # the power losses only
    python bench/bench_shared.py --trials 3

The job is bench_horizon's (~20 ms a step, a save every 100 steps), horizon 50. Every trial faults it in
save 2 (step 200): the kills at fractions spread over the save; the power losses just after the save
returns or after one of its first operations, under the ordered and the strict durability model in turn.
Alone, each trial runs the job to its fault (200 steps) and resumes it (50 steps); shared, the job runs
to the end of save 2 once and each trial only resumes. The reference comes from the project's cache in
both suites (a first one-trial suite puts it there), so the ratio is the shared suite's wall time over
the unshared one's. The bench fails when a verdict, its fault or its findings differ.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_horizon import JOB

FAULTS = ("kill9-mid-save", "power-loss")


def params(fault: str, i: int, trials: int) -> str:
    if fault == "kill9-mid-save":
        return f"save = 2, fraction = {(i + 0.5) / trials:.3f}"
    model = ("ordered", "strict")[i % 2]
    return f'save = 2, model = "{model}"' + (f", op = {i // 2}" if i > 1 else "")


def config(fault: str, trials: int) -> str:
    entries = "".join(f'[[scenarios]]\nscenario = "{fault}"\nid = "t{i}"\nparams = {{ {params(fault, i, trials)} }}\n'
                      for i in range(trials))
    return f'command = "train.py"\n{entries}'


def suite(folder: Path, *flags: str) -> tuple:
    """Seconds the suite took, and its verdicts by trial id."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "chaosckpt", "suite", *flags], cwd=folder, capture_output=True,
                          text=True)
    took = time.monotonic() - started
    if proc.returncode not in (0, 1):
        sys.exit(f"the suite was inconclusive or broke (exit {proc.returncode}):\n{proc.stdout}{proc.stderr[-2000:]}")
    newest = sorted((folder / "chaosckpt-results").glob("*-suite*"))[-1]
    doc = json.loads((newest / "result.json").read_text())
    return took, {Path(t["results_dir"]).name: (
        t["status"], t["outcome"], t["recovered_step"], t["lost_steps"],
        {k: v for k, v in t["fault"].items() if k != "shared"}, [(f["kind"], f["message"]) for f in t["findings"]])
        for t in doc["trials"]}


def measure(fault: str, trials: int) -> str:
    with tempfile.TemporaryDirectory(prefix="chaosckpt-bench-shared-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(JOB)
        (folder / "chaosckpt.toml").write_text(config(fault, trials))
        suite(folder, "-k", "t0")  # the reference, into the project's cache
        alone, alone_verdicts = suite(folder, "--no-share")
        shared, shared_verdicts = suite(folder)
    if shared_verdicts != alone_verdicts:
        sys.exit(f"{fault}: the verdicts differ: shared {shared_verdicts}, alone {alone_verdicts}")
    statuses = ", ".join(f"{i} {v[0]}" for i, v in sorted(shared_verdicts.items()))
    return (f"{trials} {fault} trials in save 2, warm reference: shared {shared:.1f} s / alone {alone:.1f} s = "
            f"{shared / alone:.3f}; the same {len(shared_verdicts)} verdicts, faults and findings ({statuses})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials of each fault in save 2")
    parser.add_argument("--fault", choices=FAULTS, default=None, help="only this scenario (default: both)")
    args = parser.parse_args()
    for fault in [args.fault] if args.fault else FAULTS:
        print(measure(fault, args.trials), flush=True)


if __name__ == "__main__":
    main()
