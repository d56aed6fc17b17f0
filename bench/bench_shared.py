"""A suite of kills inside one save, with its faulted run shared and without (goal: well under 1).

    python bench/bench_shared.py              # five kill9-mid-save trials in save 2, shared vs --no-share
    python bench/bench_shared.py --trials 3

The job is bench_horizon's (~20 ms a step, a save every 100 steps); every trial kills it in save 2
(step 200), at fractions spread over the save, horizon 50. Alone, each trial runs the job to its
fault (200 steps) and resumes it (50 steps); shared, the job runs to the end of save 2 once and each
trial only resumes. The reference comes from the project's cache in both suites (a first one-trial
suite puts it there), so the ratio is the shared suite's wall time over the unshared one's, the same
verdicts asserted.
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


def config(trials: int) -> str:
    entries = "".join(f'[[scenarios]]\nscenario = "kill9-mid-save"\nid = "f{i}"\nparams = {{ save = 2, fraction = '
                      f'{(i + 0.5) / trials:.3f} }}\n' for i in range(trials))
    return f'command = "train.py"\n{entries}'


def suite(folder: Path, *flags: str) -> tuple:
    """Seconds the suite took, and its verdicts by trial id."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "chaosckpt", "suite", *flags], cwd=folder, capture_output=True,
                          text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"the suite did not pass (exit {proc.returncode}):\n{proc.stdout}{proc.stderr[-2000:]}")
    newest = sorted((folder / "chaosckpt-results").glob("*-suite*"))[-1]
    doc = json.loads((newest / "result.json").read_text())
    return took, {Path(t["results_dir"]).name: (t["status"], t["outcome"], t["recovered_step"], t["fault"]["bytes"])
                  for t in doc["trials"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="kills in save 2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chaosckpt-bench-shared-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(JOB)
        (folder / "chaosckpt.toml").write_text(config(args.trials))
        suite(folder, "-k", "f0")  # the reference, into the project's cache
        alone, alone_verdicts = suite(folder, "--no-share")
        shared, shared_verdicts = suite(folder)
    if shared_verdicts != alone_verdicts:
        sys.exit(f"the verdicts differ: shared {shared_verdicts}, alone {alone_verdicts}")
    print(f"{args.trials} kills in save 2, warm reference: shared {shared:.1f} s / alone {alone:.1f} s = "
          f"{shared / alone:.3f}; the same {len(shared_verdicts)} verdicts")


if __name__ == "__main__":
    main()
