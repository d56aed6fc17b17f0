"""One verdict however a trial is run: each row of the verdict table run four ways, their verdicts compared.

    python bench/equivalence.py                        # every row of the verdict table (hours on 2 cores)
    python bench/equivalence.py --only sweep           # the rows whose job or scenario contains a word
    python bench/equivalence.py --only async --again 8 # ten runs of each asynchronous row alone, besides the suite
    python bench/equivalence.py --markdown eq.md       # also write the Markdown table to a file

The four ways, in one scratch project per row:

- ``alone``: ``chaosckpt run --fresh-reference``, its reference run anew (and cached);
- ``cached``: ``chaosckpt run`` again, which takes the reference the first one cached;
- ``suite``: ``chaosckpt suite`` of the trial beside a twin of it, which share one faulted run when the trial's
  fault can be rebuilt from a shared run (a kill or power loss in a numbered save of a one-process job);
- ``no-share``: the same suite with ``--no-share``, each trial with its own faulted run.

What must be the same (``signature``): the verdict, the outcome, the step recovered, the steps lost, each crash
point's outcome in a sweep, and the kinds of the findings. Exit 1 when a row's four signatures differ.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import verdict_table
from verdict_table import REPO, Job

from chaosckpt.conductor import scenario as scenarios
from chaosckpt.conductor.trial import shared

WAYS = ("alone", "cached", "suite", "no-share")


def signature(trial: Dict) -> Tuple:
    """What must not change with the way a trial is run."""
    sweep = tuple((p["op"], p.get("outcome")) for p in trial.get("sweep") or ())
    return (trial["status"], trial.get("reason"), trial.get("outcome"), trial.get("recovered_step"),
            trial.get("lost_steps"), sweep, tuple(sorted({f["kind"] for f in trial.get("findings", ())})))


def differences(signatures: Dict[str, Tuple]) -> List[str]:
    """Each way whose signature is not the first way's, with the fields that differ."""
    names = ("verdict", "reason", "outcome", "recovered step", "lost steps", "sweep outcomes", "finding kinds")
    first, *others = signatures
    out = []
    for way in others:
        fields = [n for n, a, b in zip(names, signatures[first], signatures[way]) if a != b]
        if fields:
            out.append(f"{way} differs from {first} in {', '.join(fields)}")
    return out


def project(job: Job, folder: Path) -> Path:
    """A scratch project holding the job as ``train.py``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(REPO / job.path, folder / "train.py")
    return folder


def config(job: Job, scenario: str, sweep: bool) -> str:
    """The suite's configuration: the trial (``scenario``: a row's, parameters included), and its twin where the
    two can share one faulted run."""
    _, name, *params = verdict_table.scenario_args(scenario)
    values = dict(scenarios.parse_param(p) for p in params[1::2])
    twin = shared.shareable(scenarios.load(name, values), job.nproc) is not None
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in values.items())
    entries = [f'{{ scenario = "{name}", id = "{i}", params = {{ {table} }}{", sweep = true" if sweep else ""} }}'
               for i in (["trial", "twin"] if twin else ["trial"])]
    return (f"command = {json.dumps(shlex.join(['train.py', *job.args]))}\nnproc = {job.nproc}\ntimeout = 300\n"
            f"scenarios = [{', '.join(entries)}]\n")


def chaosckpt(args: Sequence[str], cwd: Path) -> Optional[Dict]:
    """One chaosckpt invocation's trial named ``trial`` (or its only one); None when it gave no result."""
    proc = subprocess.run([sys.executable, "-m", "chaosckpt", args[0], "--json", *args[1:]], cwd=cwd,
                          capture_output=True, text=True, timeout=3600)
    try:
        trials = json.loads(proc.stdout)["trials"]
    except (ValueError, KeyError):
        return None
    named = [t.get("result") for t in trials if t.get("id") == "trial"]  # a suite's: its id, then its result
    return (named or trials or [None])[0]


def run_ways(job: Job, scenario: str, sweep: bool, scratch: Path,
             ways: Sequence[str] = WAYS, again: int = 0) -> Dict[str, Optional[Dict]]:
    """The row's trial run each of ``ways`` (all of ``WAYS`` by default, in their order), in one scratch project;
    ``again``: that many more runs with the cached reference, after the others."""
    folder = project(job, scratch / "project")
    run = ["run", "train.py", *verdict_table.scenario_args(scenario), "--timeout", "300",
           "--out", str(scratch / "results")]
    run += ["--nproc", str(job.nproc)] if job.nproc > 1 else []
    run += ["--sweep"] if sweep else []
    run += ["--", *job.args]
    fresh = {"alone": ["--fresh-reference"], "cached": []}
    got = {way: chaosckpt([*run[:2], *fresh[way], *run[2:]], folder) for way in ("alone", "cached") if way in ways}
    (folder / "chaosckpt.toml").write_text(config(job, scenario, sweep))
    suite = ["suite", "--out", str(scratch / "results")]
    if "suite" in ways:
        got["suite"] = chaosckpt(suite, folder)
    if "no-share" in ways:
        got["no-share"] = chaosckpt([*suite, "--no-share"], folder)
    for n in range(again):
        got[f"again {n + 1}"] = chaosckpt(run, folder)
    return got


def judge(got: Dict[str, Optional[Dict]]) -> Tuple[bool, str]:
    """Whether every way gave the same signature, and what differed (or the verdict and cause they agree on, as
    the verdict table words them)."""
    missing = [way for way, trial in got.items() if trial is None]
    if missing:
        return False, f"no result from {', '.join(missing)}"
    diff = differences({way: signature(trial) for way, trial in got.items()})
    return (False, "; ".join(diff)) if diff else (True, f"{got['alone']['status'].upper()}: "
                                                       f"{verdict_table.cause(got['alone'])}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only rows whose job or scenario contains this text")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown table to this file")
    parser.add_argument("--again", type=int, default=0, metavar="N",
                        help="N more runs of each row with the cached reference (--again 8: ten runs of its trial "
                             "alone, with the suite's two besides)")
    args = parser.parse_args(argv)
    jobs = {**verdict_table.JOBS, **verdict_table.SWEEP_JOBS}
    table = [(*r[:4], False) for r in verdict_table.ROWS] + [(*r[:4], True) for r in verdict_table.SWEEP_ROWS]
    rows = [(key, scen, f"{expected}: {cause}", sweep) for key, scen, expected, cause, sweep in table
            if expected != "REFUSED" and (args.only in key or args.only in verdict_table.shown(scen, sweep)
                                          or args.only in jobs[key].path)]
    lines = ["| job | scenario | expected | same in every way | verdict and cause, or what differed |",
             "|---|---|---|---|---|"]
    same = 0
    with tempfile.TemporaryDirectory(prefix="equivalence-") as tmp:
        for index, (key, scen, expected, sweep) in enumerate(rows):
            started = time.monotonic()
            ok, what = judge(run_ways(jobs[key], scen, sweep, Path(tmp) / str(index), again=args.again))
            same += ok
            shown = verdict_table.shown(scen, sweep)
            lines.append(f"| {jobs[key].name} | {shown} | {expected} | {'yes' if ok else '**no**'} | {what} |")
            print(f"[{index + 1}/{len(rows)}] {jobs[key].name} x {shown}: {'same' if ok else 'DIFFERENT'} ({what}) "
                  f"in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    more = f", and {args.again} more runs with the cached reference" if args.again else ""
    lines += ["", f"{same} of {len(rows)} rows give one verdict in every way ({', '.join(WAYS)}{more})."]
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
