"""How fast the CLI starts for what needs no torch: ``--help``, ``--version``, ``scenarios`` and a usage error.

Each is run 5 times in a fresh interpreter; the median wall time is printed beside ``python -c pass``'s.
Run from a checkout: ``PYTHONPATH=$PWD python3 bench/bench_startup.py``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 5
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "chaosckpt --help": [sys.executable, "-m", "chaosckpt", "--help"],
    "chaosckpt --version": [sys.executable, "-m", "chaosckpt", "--version"],
    "chaosckpt scenarios": [sys.executable, "-m", "chaosckpt", "scenarios"],
    "chaosckpt run (usage error)": [sys.executable, "-m", "chaosckpt", "run", "--no-such-flag"],
}


def median_s(argv: list) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    base = None
    for name, argv in CASES.items():
        took = median_s(argv)
        base = base or took
        print(f"{name:30s} {took * 1000:7.0f} ms  {took / base:5.1f} x python -c pass")


if __name__ == "__main__":
    main()
