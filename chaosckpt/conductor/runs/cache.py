"""The reference-run cache in the project's ``.chaosckpt/`` folder.

A reference run depends only on what the job computes, so it is kept under a
key of what could change that: both commands, the relevant environment, and
chaosckpt's version with a digest of its agent's sources; and it is reused only
while the files it depended on are unchanged: the job's sources and every file
its processes read from the working directory (the agent reports them), or the
whole directory when the agent could not see the job. A log the user writes
beside the job changes nothing. A suite runs the reference once and every
trial, and every later invocation with the same key, reuses it. Only
references that finished with status 0 are kept, so a flaky failure is never
replayed from the cache. Entries are written under a temporary name and
renamed into place, so a reader sees a whole entry or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import asdict, replace
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import chaosckpt
from chaosckpt import __version__, protocol
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import RunRecord
from chaosckpt.conductor.runs import horizon, launcher, locks, sandbox
from chaosckpt.conductor.runs.launcher import RunSpec
from chaosckpt.conductor.runs.runlog import RunLog

FOLDER = ".chaosckpt"
RUN_FILE = "run.json"
MANIFEST = "manifest.json"
"""Size and digest of every file of a finished reference run, written last: an entry without it is unfinished."""
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


SOURCES = (".py", ".sh", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini")
"""Files with these endings are the job's sources: checked whether or not the reference run was seen reading them,
and one appearing invalidates the entry."""
INPUTS = "inputs.json"


def _tree(workdir: Path, exclude: Iterable[Path]) -> List[str]:
    """Every file the sandbox would copy, relative to ``workdir``, sorted."""
    workdir = workdir.resolve()
    skip = {Path(p).resolve() for p in exclude}
    out = []
    for root, dirs, files in os.walk(workdir):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if d not in sandbox.ALWAYS_EXCLUDED and here / d not in skip)
        out += [str((here / name).relative_to(workdir)) for name in sorted(files) if here / name not in skip]
    return out


def _file_id(path: Path) -> Optional[str]:
    """What a file is now: its link target, its size and time (above ``LARGE_FILE``), its digest; None if absent."""
    if path.is_symlink():
        return "link:" + os.readlink(path)
    try:
        st = path.stat()
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if st.st_size > LARGE_FILE:
        return f"large:{st.st_size}:{st.st_mtime_ns}"
    return _file_digest(path)


def _sources(workdir: Path, exclude: Iterable[Path], command: Iterable[str]) -> List[str]:
    named = {os.path.normpath(a) for a in command}
    return [rel for rel in _tree(workdir, exclude) if rel.endswith(SOURCES) or rel in named]


def _reports(events: Path, box: Path) -> Optional[List[Dict]]:
    """What each of the reference's processes reported reading, or None when one could not say (no report: a
    job the agent does not reach, or a process whose working directory was not the sandbox)."""
    reports = []
    for path in sorted(events.glob(f"{protocol.INPUTS_PREFIX}*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(report, dict) or Path(str(report.get("cwd", ""))).resolve() != box.resolve():
            return None
        reports.append(report)
    return reports or None


def _read_by_job(reports: Optional[List[Dict]]) -> Optional[List[str]]:
    """The files (relative to the sandbox) the reference's processes read; None when one read too many to say."""
    if reports is None or any(not isinstance(r.get("files"), list) for r in reports):
        return None
    return sorted({str(f) for r in reports for f in r["files"]})


VOLATILE_ENV = ("PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLUMNS", "LINES", "SHELL")
"""Variables a shell changes on its own: left out when a job's code walks the whole environment."""


def _env_read(reports: Optional[List[Dict]], command: Sequence[str]) -> Optional[List[str]]:
    """The environment variables the job's own code read; None, for all of them but ``VOLATILE_ENV``, when it
    walked the environment, when its processes could not say, or when a program the agent does not reach (a
    shell script) started it."""
    first = os.path.basename(command[0]) if command else ""
    if not reports or not (first.startswith("python") or first == "torchrun" or first.endswith(".py")):
        return None
    names: set = set()
    for report in reports:
        if not isinstance(report.get("env"), list):
            return None
        names.update(str(n) for n in report["env"])
    return sorted(names)


def _whole_env() -> List[str]:
    return sorted(n for n in os.environ if n not in VOLATILE_ENV)


def _env_digest(name: str) -> Optional[str]:
    """A digest of the variable's value, or None when it is unset; values are never stored (they can be secrets)."""
    value = os.environ.get(name)
    return None if value is None else hashlib.sha256(f"{name}={value}".encode()).hexdigest()[:16]


def write_inputs(dest: Path, box: Path, workdir: Path, exclude: Iterable[Path], command: Iterable[str]) -> None:
    """``dest/inputs.json``: what the reference depended on, as the user's working directory has it now."""
    reports = _reports(dest / "events", box)
    read = _read_by_job(reports)
    sources = _sources(workdir, exclude, command)
    files = _tree(workdir, exclude) if read is None else sorted({*read, *sources})
    names = _env_read(reports, list(command))
    doc = {"sources": sources, "files": {rel: _file_id(workdir / rel) for rel in files}, "env_all": names is None,
           "env": {name: _env_digest(name) for name in (_whole_env() if names is None else names)}}
    atomic.write_text(dest / INPUTS, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def inputs_changed(folder: Path, workdir: Path, exclude: Iterable[Path], command: Iterable[str]) -> Optional[str]:
    """How the files a stored reference run depended on differ from the working directory's now, or None."""
    try:
        doc = json.loads((folder / INPUTS).read_text())
    except (OSError, ValueError):
        return f"it has no readable {INPUTS}"
    for rel, ident in sorted(doc["files"].items()):
        if _file_id(workdir / rel) != ident:
            return f"{rel} changed"
    for name, digest in sorted(doc.get("env", {}).items()):
        if _env_digest(name) != digest:
            return f"the environment variable {name} changed"
    appeared = sorted(set(_whole_env()) - set(doc.get("env", {}))) if doc.get("env_all", True) else []
    if appeared:
        return f"the environment variable {appeared[0]} is new"
    new = sorted(set(_sources(workdir, exclude, command)) - set(doc["sources"]))
    return f"{new[0]} is new" if new else None


def _agent_digest() -> str:
    """A digest of the agent and protocol sources, so a development checkout invalidates old entries too."""
    root = Path(chaosckpt.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted([*root.joinpath("agent").rglob("*.py"), root / "protocol.py"]):
        h.update(path.read_bytes())
    return h.hexdigest()


def _torch_version() -> Optional[str]:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def key_parts(command: List[str], resume_command: List[str], maps: Sequence[str] = (),
              exclude: Sequence[str] = ()) -> Dict[str, object]:
    """What the reference run depends on besides its files (see ``inputs_changed``), as a document (stored
    next to each entry, to explain it); the sandbox's ``--map`` and ``--exclude`` paths change what it sees."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k == "PATH"}
    return {
        "command": _program_resolved(command),
        "resume_command": _program_resolved(resume_command),
        "env": env,
        "python": sys.version,
        "torch": _torch_version(),
        "chaosckpt": __version__,
        "agent": _agent_digest(),
        "maps": [str(m) for m in maps],
        "exclude": [str(e) for e in exclude],
    }


def _program_resolved(command: List[str]) -> List[str]:
    """The command with its program's links resolved: ``python`` and ``python3`` (``python -m chaosckpt`` and the
    ``chaosckpt`` script) name one interpreter, and one reference serves both."""
    first = command[:1]
    if first and os.path.isabs(first[0]) and os.path.isfile(first[0]):
        first = [os.path.realpath(first[0])]
    return [*first, *command[1:]]


def key(parts: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _file_digest(path: Path) -> str:
    """sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> List[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MANIFEST)


def write_manifest(folder: Path) -> None:
    files = {str(p.relative_to(folder)): [p.stat().st_size, _file_digest(p)] for p in _files(folder)}
    atomic.write_text(folder / MANIFEST, json.dumps(files, indent=1, sort_keys=True) + "\n")


def damage(folder: Path) -> Optional[str]:
    """What is wrong with a stored reference run (a file missing, cut short or changed), or None if it is whole."""
    try:
        files = json.loads((folder / MANIFEST).read_text())
        entries = sorted((str(rel), int(size), str(digest)) for rel, (size, digest) in files.items())
    except (OSError, ValueError, TypeError, AttributeError):
        return f"its {MANIFEST} is missing, unreadable or of another shape"
    for rel, size, digest in entries:
        path = folder / rel
        try:
            actual = path.stat().st_size
        except OSError:
            return f"{rel} is missing"
        if actual != size:
            return f"{rel} holds {actual} bytes, {size} were stored"
        if _file_digest(path) != digest:
            return f"{rel} changed since it was stored"
    return None


def run_reference(command: List[str], workdir: Path, dest: Path, timeout_s: float, exclude: Iterable[Path],
                  stop: Optional[Dict] = None, maps: Sequence[str] = ()) -> RunRecord:
    """Run the job once without a fault into ``dest`` (``events/``, logs, ``run.json``) from a private sandbox,
    to its end or to the horizon ``stop``."""
    dest.mkdir(parents=True, exist_ok=True)
    box = dest.parent / f".sandbox-{dest.name}"
    sandbox.remove(box)  # what a killed reference run left
    try:
        sandbox.create(workdir, box, exclude=[*exclude, dest])
        result = launcher.launch(RunSpec("reference", list(command), box, dest, timeout_s, stop=stop, maps=list(maps),
                                         env={protocol.ENV_INPUTS: "1"}))
        write_inputs(dest, box, workdir, [*exclude, dest], command)
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
        stopped=result.stopped,
        stop=stop,
        confinement=result.confinement,
    )
    write_entry(dest, record)
    return record


def keepable(record: RunRecord) -> bool:
    """Whether a reference run may serve later trials: it ended well (status 0, or stopped at its horizon), on time,
    leaving no process behind; a flaky failure is never replayed from the cache."""
    return (record.returncode == 0 or bool(record.stopped)) and not record.timed_out and not record.survivors


def write_entry(dest: Path, record: RunRecord) -> None:
    """``run.json`` (with paths relative to ``dest``) and the manifest, written last: ``dest`` is then whole."""
    rel = replace(record, stdout="stdout.log", stderr="stderr.log", events="events")
    atomic.write_text(dest / RUN_FILE, json.dumps(asdict(rel), indent=2) + "\n")
    write_manifest(dest)


def restore(source: Path, dest: Path) -> RunRecord:
    """Copy a finished reference run from ``source`` to ``dest``; its record, with paths under ``dest``."""
    shutil.copytree(source, dest, dirs_exist_ok=True)
    record = RunRecord(**json.loads((source / RUN_FILE).read_text()))
    record.stdout, record.stderr, record.events = (str(dest / p) for p in (record.stdout, record.stderr, record.events))
    record.cached = True
    return record


class ReferenceCache:
    """Finished reference runs under ``.chaosckpt/references/<key>/``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def of_project(cls, workdir: Path) -> "ReferenceCache":
        return cls(project_folder(workdir) / "references")

    def lock(self, key: str) -> int:
        """Own the entry ``key`` (held while its reference runs), waiting for another chaosckpt that owns it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f".{key}.lock"
        try:
            return locks.acquire(path)
        except locks.Busy as busy:
            print(f"chaosckpt: waiting for another chaosckpt (pid {busy.pid or 'unknown'}) that is running the same "
                  "reference, to reuse it", file=sys.stderr)
            return locks.acquire(path, wait=True)

    def lookup(self, key: str, workdir: Path, exclude: Iterable[Path], command: Iterable[str]) -> Optional[Path]:
        """The whole entry under ``key`` whose files are as ``workdir`` has them; a damaged one is discarded, with
        a note, and one whose files changed is discarded quietly, so the reference runs again."""
        entry = self.folder / key
        if not entry.is_dir():
            return None
        why = damage(entry)
        if why is not None:
            print(f"chaosckpt: the cached reference run {key[:12]} is damaged ({why}); discarded it, running the "
                  "reference again", file=sys.stderr)
        if why is not None or inputs_changed(entry, workdir, exclude, command) is not None:
            self.discard(key)
            return None
        return entry

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

    def keep(self, key: str, run_dir: Path, parts: Dict[str, object], record: RunRecord) -> None:
        """Make ``run_dir`` the entry under ``key`` when its reference may serve later trials (``keepable``)."""
        if keepable(record):
            self.discard(key)
            self.store(key, run_dir, parts)

    def discard(self, key: str) -> None:
        shutil.rmtree(self.folder / key, ignore_errors=True)


def reaches(entry: Path, stop: Optional[Dict]) -> bool:
    """Whether the cached reference in ``entry`` went as far as the horizon ``stop`` asks (None: its end)."""
    record = RunRecord(**json.loads((entry / RUN_FILE).read_text()))
    return horizon.covers(RunLog.read(entry / record.events), record.stopped, stop)


def reference_into(dest: Path, key_: str, parts: Dict[str, object], command: List[str], workdir: Path,
                   timeout_s: float, exclude: Iterable[Path], fresh: bool = False, stop: Optional[Dict] = None,
                   maps: Sequence[str] = ()) -> bool:
    """Fill ``dest`` with the reference run: from the project's cache, else run it to the horizon ``stop``
    (and cache it when it exited 0 or reached its horizon). A cached run stopped short of ``stop`` is run
    again; ``fresh`` runs it even when cached, replacing the entry. True when it came from the cache."""
    with claimed(key_, workdir, exclude, command, stop, fresh) as (store, entry):
        shutil.rmtree(dest, ignore_errors=True)  # what a killed run left there
        if entry is not None:
            restore(entry, dest)
            return True
        store.keep(key_, dest, parts, run_reference(command, workdir, dest, timeout_s, exclude, stop, maps))
        return False


@contextlib.contextmanager
def claimed(key_: str, workdir: Path, exclude: Iterable[Path], command: Iterable[str], stop: Optional[Dict],
            fresh: bool) -> Iterator[Tuple["ReferenceCache", Optional[Path]]]:
    """Own the cache entry ``key_`` while a reference is taken from it or run for it: the project's cache, and the
    entry when it matches the job and goes as far as ``stop`` (None when ``fresh``, when there is none, or when it
    stopped short)."""
    store = ReferenceCache.of_project(workdir)
    lock = store.lock(key_)
    try:
        entry = None if fresh else store.lookup(key_, workdir, exclude, command)
        yield store, entry if entry is not None and reaches(entry, stop) else None
    finally:
        locks.release(lock)
