"""``chaosckpt run`` takes the uninterrupted run from the project's cache while nothing it depended on changed:
the job's files, the environment variables its own code read, chaosckpt (issue 35)."""

from __future__ import annotations

import pytest
from conftest import REPO, run_chaosckpt

pytestmark = pytest.mark.e2e
CACHED = "the uninterrupted run came from the project's cache"


def test_run_reuses_the_reference_until_an_environment_variable_the_job_reads_changes(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    job = (REPO / "examples" / "robust_train.py").read_text()
    (project / "train.py").write_text("import os\nWARMUP = os.environ.get('MYJOB_WARMUP', '0')\n" + job)

    def trial(*args, env=None):
        res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--out", str(tmp_path / "r"), *args],
                            cwd=project, env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        return res

    first = trial()
    assert CACHED not in first.stderr
    again = trial(env={"MYJOB_UNREAD": "1"})
    assert CACHED in again.stderr, "a variable the job never reads changes nothing"
    assert again.stdout.splitlines()[0] == first.stdout.splitlines()[0], "the same verdict, reference cached or not"
    assert CACHED not in trial(env={"MYJOB_WARMUP": "5"}).stderr
    assert CACHED not in trial("--fresh-reference").stderr
