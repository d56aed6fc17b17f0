"""The resume-exited finding: which rank, which exception, after which step, in which function of the job."""

from __future__ import annotations

import sysconfig

from chaosckpt.conductor.runs import exits
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog

LIB = sysconfig.get_paths()["purelib"] + "/torch/serialization.py"


def _rank(rank, uncaught=None):
    hello = {"t": "hello", "ts": 0.0, "rank": rank, "world_size": 2, "cwd": "/work/job"}
    return ProcessLog(pid=10 + rank, rank=rank, hello=hello, steps=[{"step": 1}], uncaught=uncaught)


def test_the_failing_rank_its_exception_step_and_own_function_are_named():
    frames = [{"file": "/work/job/train.py", "line": 90, "func": "<module>"},
              {"file": "/work/job/train.py", "line": 40, "func": "save_checkpoint"},
              {"file": LIB, "line": 900, "func": "save"}]
    error = {"t": "uncaught", "ts": 5.0, "exc": "FileNotFoundError", "error": "FileNotFoundError: [Errno 2] gone",
             "step": 32, "frames": frames}
    run = RunLog([_rank(0), _rank(1, error)])
    finding = exits.resume_exit(run, 1, {0: 32, 1: 32}, "")
    assert finding.message == ("rank 1 of the resumed run exited with status 1 on FileNotFoundError: [Errno 2] gone "
                               "after step 64 in save_checkpoint() (train.py line 40)")
    assert (finding.details["rank"], finding.details["function"]) == (1, "save_checkpoint")


def test_an_exit_without_an_exception_falls_back_to_the_last_error_line():
    run = RunLog([_rank(0)])
    finding = exits.resume_exit(run, 3, {0: 8}, "job failed on purpose")
    assert finding.message == "the resumed run exited with status 3: job failed on purpose"
    assert exits.resume_exit(run, 0, {0: 8}, "") is None


def test_a_run_that_left_no_events_is_told_by_how_it_ended(tmp_path):
    quiet, loud = tmp_path / "quiet.log", tmp_path / "loud.log"
    quiet.write_text("")
    loud.write_text("Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n")
    assert exits.ended(-9, 0.37, quiet) == "it was killed by SIGKILL after 0.4 s, printing nothing"
    assert exits.ended(1, 2.0, loud) == ("it exited with status 1 after 2.0 s, its last line: "
                                         "ModuleNotFoundError: No module named 'torch'")
