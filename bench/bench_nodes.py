"""The event stream's cost: step time of a job whose agent's events a node streams to the conductor over
TCP, against the same job conducted locally (events read from the local folder). Goal: ratio <= 1.02.

    python bench/bench_nodes.py              # 400 steps a run, 3 runs of each, taken alternately
    python bench/bench_nodes.py --steps 200 --repeat 1

The job is ``workload.py step``: a ~10M-parameter MLP's optimizer steps on one thread, the agent
injected (a ``step`` event with fingerprints every step). "local" runs it through the launcher as a
one-machine trial does; "streamed" runs it as node 0 of a one-node cluster: ``chaosckpt node`` starts
it, tails its event files and streams every line to the conductor over the HMAC-authenticated TCP link,
and the conductor mirrors them into the run's events folder. The figure is the median step time
streamed over local, medians over ``--repeat`` runs of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chaosckpt.conductor.runs import launcher  # noqa: E402
from chaosckpt.conductor.nodes import cluster, conduct  # noqa: E402
from chaosckpt.conductor.runs.launcher import RunSpec  # noqa: E402
from chaosckpt.conductor.runs.runlog import RunLog  # noqa: E402

WORKLOAD = Path(__file__).resolve().parent / "workload.py"


def step_s(result) -> float:
    """The workload's median step time, from its stdout (a streamed run's lines carry a node prefix)."""
    line = result.stdout.read_text().strip().splitlines()[-1]
    return json.loads(line[line.index("{"):])["step_s"]


def one(kind: str, steps: int, root: Path, n: int) -> float:
    spec = RunSpec(kind, [sys.executable, str(WORKLOAD), "step", str(steps)], root, root / f"{kind}-{n}", 600)
    result = launcher.launch(spec) if kind == "local" else conduct.launch(spec, cluster.Cluster(1))
    assert result.returncode == 0 and not result.survivors, f"the {kind} run failed: see {result.stderr}"
    recorded = len(RunLog.read(result.events_dir).trainer().steps)
    assert recorded == steps + 5, f"the {kind} run's events hold {recorded} steps of {steps + 5}"
    return step_s(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times = {"local": [], "streamed": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.repeat):
            for kind in ("local", "streamed"):
                times[kind].append(one(kind, args.steps, Path(tmp), n))
    local, streamed = statistics.median(times["local"]), statistics.median(times["streamed"])
    print(json.dumps({"steps": args.steps, "repeat": args.repeat, "local_step_ms": round(local * 1e3, 3),
                      "streamed_step_ms": round(streamed * 1e3, 3), "ratio": round(streamed / local, 4),
                      "goal": 1.02}))


if __name__ == "__main__":
    main()
