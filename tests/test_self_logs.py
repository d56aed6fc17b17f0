"""A noisy job's logs are capped, head and tail kept, and their last line read from the end (issue 16 item 6)."""

from __future__ import annotations

import sys

import pytest

from chaosckpt.conductor.runs import exits, launcher, logcap
from chaosckpt.conductor.runs.launcher import RunSpec
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import compare

NOISY = """
import sys
sys.stderr.write("first line\\n")
block = ("x" * 1023 + "\\n") * 1024
for _ in range(40):
    sys.stderr.write(block)
sys.stderr.write("the last words\\n")
"""


def test_a_job_writing_40_mb_to_stderr_leaves_a_capped_log_with_its_head_its_tail_and_the_bytes_dropped(tmp_path):
    total = len("first line\n") + 40 * 1024 * 1024 + len("the last words\n")
    result = launcher.launch(RunSpec("noisy", [sys.executable, "-c", NOISY], tmp_path, tmp_path / "log", 60))

    assert result.returncode == 0
    data = result.stderr.read_bytes()
    dropped = total - logcap.HEAD - logcap.TAIL
    note = (f"\n[chaosckpt: {dropped} bytes of output dropped here; the first {logcap.HEAD} and the last "
            f"{logcap.TAIL} bytes are kept]\n").encode()
    assert len(data) == logcap.HEAD + len(note) + logcap.TAIL
    assert data.startswith(b"first line\n") and note in data and data.endswith(b"the last words\n")
    assert compare.tail_line(result.stderr) == "the last words"


def test_a_short_log_is_kept_whole(tmp_path):
    result = launcher.launch(RunSpec("quiet", [sys.executable, "-c", "print('hello'); import sys; "
                                               "sys.stderr.write('oops\\n'); sys.exit(3)"],
                                     tmp_path, tmp_path / "log", 60))
    assert result.returncode == 3
    assert result.stdout.read_text() == "hello\n" and result.stderr.read_text() == "oops\n"


def test_the_last_line_is_read_from_the_end_of_a_large_log(tmp_path):
    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # a 1 GiB sparse file: reading it whole would take a GiB of memory
        f.seek(0, 2)
        f.write(b"\nRuntimeError: the end\n\n")
    assert logcap.last_line(path) == "RuntimeError: the end"


def test_the_error_line_of_a_torchrun_failure_is_the_ranks_exception_not_the_launchers_banner(tmp_path):
    """torchrun ends its stderr with a summary between rules, after the rank's own traceback."""
    job = tmp_path / "fail.py"
    job.write_text("import os\nif os.environ['RANK'] == '1':\n    raise FileNotFoundError('ckpt/tmp.pt')\n")
    result = launcher.launch(RunSpec("ranks", [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                               "--standalone", str(job)], tmp_path, tmp_path / "log", 120))
    assert result.returncode == 1
    assert result.stderr.read_text().rstrip().endswith("=" * 20)
    assert logcap.last_line(result.stderr) == "FileNotFoundError: ckpt/tmp.pt"


TORCHRUN_SUMMARY = """terminate called without an active exception
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
train.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_05:24:43
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 9084)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 9084
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_05:24:43
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 9085)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 9085
======================================================
"""


def _two_ranks(ended: bool) -> RunLog:
    hello = {"world_size": 2, "ts": 0.0}
    return RunLog([ProcessLog(9084, rank=0, hello=hello, ended=True), ProcessLog(9085, rank=1, hello=hello, ended=ended)])


@pytest.mark.parametrize("code, ended, crash", [("-6", True, True), ("1", True, False), ("-6", False, False)])
def test_a_rank_killed_after_its_script_ended_is_told_from_torchruns_summary(tmp_path, code, ended, crash):
    """Only signals after every script ended are a crash at exit; an exit status or an unfinished rank fails."""
    stderr = tmp_path / "stderr.log"
    stderr.write_text(TORCHRUN_SUMMARY.replace("{code}", code))
    found = exits.after_exit(_two_ranks(ended), 1, stderr, "the uninterrupted run")
    assert (found is not None) == crash
    if crash:
        assert found.kind == "crash-at-exit"
        assert "shutdown: rank 0 by SIGTERM and rank 1 by SIGABRT (see " in found.message
