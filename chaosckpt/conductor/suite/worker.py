"""A suite's worker process: one trial, or the faulted run a group of trials shares, run from its ``spec.json``.

Started as ``python -m chaosckpt.conductor.suite.worker SPEC``, so that Ctrl-C reaches every worker at once
and each kills its own job tree, and a worker dies with the suite.
"""

from __future__ import annotations

import errno
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, List

from chaosckpt.conductor import scenario as scenarios
from chaosckpt.conductor.errors import ExitCode, exit_code
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import document
from chaosckpt.conductor.runs import diskspace, signals

if TYPE_CHECKING:
    from chaosckpt.conductor.trial.options import TrialOptions


def worker(spec_path: Path) -> int:
    """One trial, as a suite's worker runs it: ``result.json`` is written atomically when the verdict is in; or,
    where the spec's ``prefix`` is its own folder, the faulted run a group of trials shares; or, for a spec of a
    ``reference``, the suite's reference run (``done.json`` beside the spec says whether it came from the cache)."""
    from chaosckpt.conductor.trial import run_trial, shared

    spec = json.loads(spec_path.read_text())
    if "reference" in spec:
        from chaosckpt.conductor.suite.plan_run import reference_from_spec

        cached = reference_from_spec(spec["reference"])
        atomic.write_text(spec_path.parent / "done.json", json.dumps({"cached": cached}) + "\n")
        return 0
    scen = scenarios.load(spec["scenario"], spec["params"])
    opts = from_spec(spec_path)
    if opts.prefix == opts.results_dir:
        return shared.make_prefix(scen, opts)
    trial = run_trial(scen, opts)
    atomic.write_text(opts.results_dir / "result.json", json.dumps(document([trial]), indent=2) + "\n")
    return int(exit_code([trial.status]))


def from_spec(spec_path: Path) -> "TrialOptions":
    """The trial's options in a worker's ``spec.json``."""
    from chaosckpt.conductor.trial import options

    return options.from_spec(json.loads(spec_path.read_text())["options"])


def _interrupt_once(signum: int, frame: Any) -> None:
    """A worker's SIGINT handler: the first one interrupts the trial; later ones (the terminal's and the
    suite's both arrive on Ctrl-C) are ignored, so they cannot cut short the killing of the job tree."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: List[str]) -> int:
    signals.install()
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        return worker(Path(argv[0]))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        where = Path(exc.filename).parent if isinstance(exc.filename, str) else Path(argv[0]).parent
        print(f"chaosckpt: inconclusive: {diskspace.describe(where, what='the trial could not write')}", file=sys.stderr)
        return int(ExitCode.INCONCLUSIVE)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
