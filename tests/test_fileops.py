"""The journal's replacements for open and os.* behave like the originals, in a child process that installs them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run_with_journal(tmp_path, body: str) -> dict:
    """Run ``body`` with the journal installed over ``tmp_path/ckpt``; it fills ``out``; returns out and the ops."""
    script = textwrap.dedent(
        f"""
        import io, json, os, sys
        from chaosckpt.agent import fileops
        ops = []
        journal = fileops.Journal(lambda kind, **f: ops.append(f), [{str(tmp_path / "ckpt")!r}], {str(tmp_path / "run" / "keep")!r})
        fileops.install(journal)
        os.chdir({str(tmp_path)!r})
        os.makedirs("ckpt", exist_ok=True)
        out = {{}}
        """
    ) + textwrap.dedent(body) + "\nprint(json.dumps({'out': out, 'ops': ops}))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_open_keeps_the_semantics_of_the_builtin(tmp_path):
    result = run_with_journal(tmp_path, """
        with open("ckpt/log.txt", "w", encoding="utf-8") as f:
            out["text_type"] = type(f).__name__
            out["mode"] = f.mode
            f.write("héllo\\n")
        with open("ckpt/log.txt", "a") as f:
            f.write("again\\n")
        out["read"] = open("ckpt/log.txt", encoding="utf-8").read()
        with open(b"ckpt/raw.bin", "wb", buffering=0) as f:
            out["raw_type"] = type(f).__name__
            f.write(b"abc")
        try:
            open("ckpt/raw.bin", "x")
        except FileExistsError:
            out["x"] = "exists"
        seen = []
        for path in ("ckpt/never.txt", "untracked.txt"):  # the builtin's own behaviour, outside the tracked folder
            try:
                open(path, "w", buffering=0)
            except ValueError as exc:
                seen.append((str(exc), os.path.exists(path)))
        out["unbuffered_text"] = seen[0] == seen[1]
        fd = os.open("ckpt/shared.bin", os.O_WRONLY | os.O_CREAT)
        with open(fd, "wb", closefd=False) as f:
            f.write(b"1")
        os.write(fd, b"2")
        os.close(fd)
        out["shared"] = open("ckpt/shared.bin", "rb").read().decode()
        with open("ckpt/opened.bin", "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
            f.write(b"xyz")
        """)
    out = result["out"]
    assert out == {"text_type": "TextIOWrapper", "mode": "w", "read": "héllo\nagain\n", "raw_type": "TrackedFileIO",
                   "x": "exists", "unbuffered_text": True, "shared": "12"}
    writes = [o for o in result["ops"] if o["op"] == "write"]
    assert sum(o["len"] for o in writes if o["path"].endswith("shared.bin")) == 2
    assert any(o["op"] == "open" and o["path"].endswith("raw.bin") for o in result["ops"])
    opened = [o for o in result["ops"] if o.get("path", "").endswith("opened.bin")]
    assert [o["op"] for o in opened] == ["open", "write"] and opened[1]["len"] == 3  # journaled once


def test_a_truncation_after_fsync_keeps_the_durable_bytes(tmp_path):
    result = run_with_journal(tmp_path, """
        with open("ckpt/a.pt", "wb") as f:
            f.write(b"DURABLE")
            f.flush()
            os.fsync(f.fileno())
        with open("ckpt/a.pt", "wb") as f:
            f.write(b"new")
        """)
    (trunc,) = [o for o in result["ops"] if o["op"] == "open" and o["trunc"] and not o["created"]]
    assert open(trunc["keep"], "rb").read() == b"DURABLE"


def _sizes_seen(tmp_path, journal_on: bool) -> list:
    """The file sizes on disk after each call of a job's writes into its checkpoint folder."""
    folder = tmp_path / ("on" if journal_on else "off")
    script = textwrap.dedent(
        f"""
        import json, os
        from chaosckpt.agent import fileops
        os.chdir({str(folder.parent)!r})
        os.makedirs({str(folder / "ckpt")!r})
        if {journal_on!r}:
            fileops.install(fileops.Journal(lambda kind, **f: None, [{str(folder / "ckpt")!r}], {str(folder / "run" / "keep")!r}))
        seen = []
        size = lambda p: os.path.getsize(p)
        with open({str(folder / "ckpt" / ".metadata")!r}, "wb") as f:
            for n in (1000, 3000, 2500, 5000, 100, 9000):
                f.write(b"m" * n)
                seen.append(size(f.name))
        with open({str(folder / "ckpt" / "state.json")!r}, "w") as f:
            for n in range(40):
                f.write("x" * 300)
                seen.append(size(f.name))
        print(json.dumps(seen))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_journal_leaves_the_job_s_writes_as_they_reach_the_disk(tmp_path):
    """Same buffer sizes as the job's own open(): the disk sees the same bytes after every call, agent on or off."""
    off = _sizes_seen(tmp_path, journal_on=False)
    assert off[0] == 0 and off[-1] < 40 * 300  # the buffer really holds writes back: the check can tell
    assert _sizes_seen(tmp_path, journal_on=True) == off
