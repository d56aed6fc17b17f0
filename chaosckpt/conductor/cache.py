"""The reference-run cache in the project's ``.chaosckpt/`` folder.

A reference run depends only on what the job computes, so it is kept under a
key of everything that could change that: both commands, the contents of the
working directory, the relevant environment, and chaosckpt's version with a
digest of its agent's sources. A suite runs the reference once and every
trial, and every later invocation with the same key, reuses it. Only
references that finished with status 0 are kept, so a flaky failure is never
replayed from the cache. Entries are written under a temporary name and
renamed into place, so a reader sees a whole entry or none.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from chaosckpt import __version__
from chaosckpt.conductor import atomic, launcher, sandbox
from chaosckpt.conductor.launcher import RunSpec
from chaosckpt.conductor.result import RunRecord

FOLDER = ".chaosckpt"
RUN_FILE = "run.json"
LARGE_FILE = 16 * 1024 * 1024
"""Files above this size enter the key by size and modification time instead of contents (datasets)."""
ENV_PREFIXES = ("PYTHON", "TORCH", "PYTORCH_", "CUDA", "CUBLAS", "CUDNN", "NCCL_", "OMP_", "MKL_", "OPENBLAS_", "LD_", "CHAOSCKPT_")
"""Environment variables that can change what a job computes; the rest (PATH excepted) stay out of the key."""

_README = """\
# chaosckpt's folder

chaosckpt keeps here what it reuses between runs of this project:

* `references/`: cached reference runs, keyed by the command, the working
  directory's contents, the relevant environment and chaosckpt's version;
  anything in the key changes, a new reference is run.
* `history.sqlite`: the results of every `chaosckpt suite`, read by
  `chaosckpt history`.

Everything here can be deleted at any time. It is not meant for version
control (see .gitignore) or backups (see CACHEDIR.TAG).
"""
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by chaosckpt.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)


def project_folder(workdir: Path) -> Path:
    """The project's ``.chaosckpt/`` folder, created with the files that explain it on first use."""
    folder = Path(workdir) / FOLDER
    folder.mkdir(exist_ok=True)
    for name, text in (("README.md", _README), (".gitignore", "*\n"), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
        if not (folder / name).exists():
            atomic.write_text(folder / name, text)
    return folder


def _tree_digest(workdir: Path, exclude: Iterable[Path]) -> str:
    """A digest of every file the sandbox would copy: names, link targets and contents."""
    workdir = workdir.resolve()
    skip = {Path(p).resolve() for p in exclude}
    h = hashlib.sha256()
    for root, dirs, files in os.walk(workdir):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if d not in sandbox.ALWAYS_EXCLUDED and here / d not in skip)
        for name in sorted(files):
            path = here / name
            if path in skip:
                continue
            h.update(str(path.relative_to(workdir)).encode() + b"\0")
            if path.is_symlink():
                h.update(b"link:" + os.readlink(path).encode())
                continue
            st = path.stat()
            if st.st_size > LARGE_FILE:
                h.update(f"large:{st.st_size}:{st.st_mtime_ns}".encode())
                continue
            with open(path, "rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest() if hasattr(hashlib, "file_digest") else hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _agent_digest() -> str:
    """A digest of the agent and protocol sources, so a development checkout invalidates old entries too."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted([*root.joinpath("agent").rglob("*.py"), root / "protocol.py"]):
        h.update(path.read_bytes())
    return h.hexdigest()


def _torch_version() -> Optional[str]:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def key_parts(command: List[str], resume_command: List[str], workdir: Path, exclude: Iterable[Path]) -> Dict[str, object]:
    """What the reference run depends on, as a document (stored next to each entry, to explain it)."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k == "PATH"}
    return {
        "command": list(command),
        "resume_command": list(resume_command),
        "workdir": _tree_digest(workdir, exclude),
        "env": env,
        "python": sys.version,
        "torch": _torch_version(),
        "chaosckpt": __version__,
        "agent": _agent_digest(),
    }


def key(parts: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def run_reference(command: List[str], workdir: Path, dest: Path, timeout_s: float, exclude: Iterable[Path],
                  maps: Sequence[str] = ()) -> RunRecord:
    """Run the job once without a fault into ``dest`` (``events/``, logs, ``run.json``) from a private sandbox."""
    dest.mkdir(parents=True, exist_ok=True)
    box = dest.parent / f".sandbox-{dest.name}"
    try:
        sandbox.create(workdir, box, exclude=[*exclude, dest])
        result = launcher.launch(RunSpec("reference", list(command), box, dest, timeout_s, maps=list(maps)))
    finally:
        sandbox.remove(box)
    record = RunRecord(
        name="reference",
        command=list(command),
        returncode=result.returncode,
        duration_s=round(result.duration_s, 3),
        timed_out=result.timed_out,
        fault_fired=result.fault_fired,
        survivors=len(result.survivors),
        stdout="stdout.log",
        stderr="stderr.log",
        events="events",
    )
    atomic.write_text(dest / RUN_FILE, json.dumps(asdict(record), indent=2) + "\n")
    return record


def restore(source: Path, dest: Path) -> RunRecord:
    """Copy a finished reference run from ``source`` to ``dest``; its record, with paths under ``dest``."""
    shutil.copytree(source, dest, dirs_exist_ok=True)
    record = RunRecord(**json.loads((source / RUN_FILE).read_text()))
    record.stdout, record.stderr, record.events = (str(dest / p) for p in (record.stdout, record.stderr, record.events))
    return record


class ReferenceCache:
    """Finished reference runs under ``.chaosckpt/references/<key>/``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def of_project(cls, workdir: Path) -> "ReferenceCache":
        return cls(project_folder(workdir) / "references")

    def lookup(self, key: str) -> Optional[Path]:
        entry = self.folder / key
        return entry if (entry / RUN_FILE).is_file() else None

    def store(self, key: str, run_dir: Path, parts: Dict[str, object]) -> None:
        """Keep ``run_dir`` (a reference run that exited 0) under ``key``; a concurrent writer's entry wins."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.folder))
        try:
            shutil.copytree(run_dir, tmp, dirs_exist_ok=True)
            atomic.write_text(tmp / "key.json", json.dumps(parts, indent=2, sort_keys=True) + "\n")
            os.rename(tmp, self.folder / key)
            atomic.fsync_dir(self.folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)

    def discard(self, key: str) -> None:
        shutil.rmtree(self.folder / key, ignore_errors=True)


def reference_into(dest: Path, key_: str, parts: Dict[str, object], command: List[str], workdir: Path,
                   timeout_s: float, exclude: Iterable[Path], fresh: bool = False, maps: Sequence[str] = ()) -> bool:
    """Fill ``dest`` with the reference run: from the project's cache, else run it (and cache it when it
    exited 0). ``fresh`` runs it even when cached, replacing the entry. True when it came from the cache."""
    store = ReferenceCache.of_project(workdir)
    entry = None if fresh else store.lookup(key_)
    if entry is not None:
        restore(entry, dest)
        return True
    shutil.rmtree(dest, ignore_errors=True)
    record = run_reference(command, workdir, dest, timeout_s, exclude, maps)
    if record.returncode == 0 and not record.timed_out and not record.survivors:
        if fresh:
            store.discard(key_)
        store.store(key_, dest, parts)
    return False
