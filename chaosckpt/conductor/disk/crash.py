"""What a disk holds after a crash, rebuilt from the agent's durability journal.

Three models, named for what they assume:

- ``none``: a process crash (SIGKILL), not a power loss: the page cache survives,
  the disk holds every byte the job wrote.
- ``ordered`` (ext4-like): namespace operations survive in order; a file's data
  only up to its last fsync, so a renamed file that was never fsynced comes back empty.
- ``strict`` (POSIX minimum): file data only up to its last fsync, and a name a
  created, renamed or unlinked entry got survives only if its directory was
  fsynced afterwards.

Files are assumed to be written sequentially (as checkpoints are): the durable
data of a file is a prefix of what it holds at the end, or of the copy the agent
kept before a truncation or a replacement destroyed it.

The journal is the job's to write (``journal``): the disk refuses an operation that would make a rebuild write
through a symbolic link or read a kept copy from elsewhere, and ``materialize`` writes only beneath the folder it
is given, through descriptors that follow no link (``beneath``).
"""

from __future__ import annotations

import copy
import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Literal, Optional, Tuple, Union

from chaosckpt.conductor.disk import beneath, journal

Model = Literal["none", "ordered", "strict"]
MODELS = ("none", "ordered", "strict")
Ino = Tuple[int, int]


@dataclass
class Inode:
    """One file's data: its current version and size, and what of it is durable."""

    version: int = 0
    size: int = 0
    durable: Optional[Tuple[int, int]] = None  # (version, bytes) made durable by an fsync
    location: Optional[str] = None  # where its newest data is at the end of the journal
    kept: Dict[int, str] = field(default_factory=dict)  # older versions preserved by the agent
    link: Optional[str] = None  # a symbolic link's target: a name, no data (Lightning's save_last="link")


@dataclass
class Entry:
    """A name on the disk after the crash and the data it holds."""

    path: str
    source: Optional[str]
    length: int
    ino: Optional[Ino] = None
    version: int = 0
    link: Optional[str] = None

    def key(self) -> Tuple:
        return (self.path, self.ino, self.version, self.length, self.link)


_MADE = {"open": "path", "rename": "dst", "link": "path", "symlink": "path", "mkdir": "path"}
"""The field of each operation that names the entry it makes."""


class Disk:
    """Replays journal operations over the initial contents of the checkpoint directories."""

    def __init__(self, roots: Iterable[str], keeps: Optional[str] = None) -> None:
        self.roots = [os.path.abspath(r) for r in roots]
        self.keeps = keeps
        """The folder the agent keeps the data an operation destroys in (the run's ``events/keep``): the only
        place besides the roots a rebuild reads from; None until the run that fills it is known."""
        self.inodes: Dict[Ino, Inode] = {}
        self.names: Dict[str, Ino] = {}
        self.dirs: set = set()
        self.durable_names: Dict[str, Dict[str, object]] = {}
        self.ops_applied = 0
        self.refused: List[journal.Refusal] = []
        """The operations ``apply`` refused, in order."""

    @classmethod
    def scan(cls, roots: Iterable[str], keeps: Optional[str] = None) -> "Disk":
        """The disk as the job finds it at start: everything on it is durable."""
        disk = cls(roots, keeps)
        for root in disk.roots:
            if not os.path.isdir(root):
                continue
            disk.dirs.add(root)
            for parent, dirnames, filenames in os.walk(root):
                for d in dirnames:
                    disk.dirs.add(os.path.join(parent, d))
                for f in filenames:
                    path = os.path.join(parent, f)
                    st = os.lstat(path)
                    ino = (st.st_dev, st.st_ino)
                    link = os.readlink(path) if os.path.islink(path) else None
                    disk.inodes[ino] = Inode(size=0 if link else st.st_size, durable=(0, 0 if link else st.st_size),
                                             location=path, link=link)
                    disk.names[path] = ino
        for d in disk.dirs:
            disk.durable_names[d] = disk._listing(d)
        return disk

    def _listing(self, directory: str) -> Dict[str, object]:
        out: Dict[str, object] = {p: ino for p, ino in self.names.items() if os.path.dirname(p) == directory}
        out.update({d: "dir" for d in self.dirs if os.path.dirname(d) == directory})
        return out

    def _inode(self, ino: Iterable[int]) -> Tuple[Ino, Inode]:
        key = (int(list(ino)[0]), int(list(ino)[1]))
        return key, self.inodes.setdefault(key, Inode())

    def apply(self, op: dict) -> bool:
        """One journal operation, of the shape the agent records (``journal.malformed`` says it is); False when it
        is refused (``refusal``): the disk stays as it was and keeps the refusal in ``refused``."""
        refused = self.refusal(op)
        if refused is not None:
            self.refused.append(journal.Refusal(op.get("n"), op["op"], *refused))
            return False
        kind = op["op"]
        self.ops_applied += 1
        if kind == "open":
            key, inode = self._inode(op["ino"])
            if op["trunc"] and not op["created"]:
                if op.get("keep"):
                    inode.kept[inode.version] = op["keep"]
                inode.version += 1
                inode.size = 0
            else:
                inode.size = op.get("size", inode.size)
            inode.location = op["path"]
            self.names[op["path"]] = key
        elif kind == "write":
            _, inode = self._inode(op["ino"])
            inode.size = max(inode.size, op["off"] + op["len"])
        elif kind == "fsync":
            _, inode = self._inode(op["ino"])
            inode.durable = (inode.version, op["size"])
        elif kind == "dirsync":
            if op.get("path"):
                self.durable_names[op["path"]] = self._listing(op["path"])
        elif kind == "rename":
            key = self.names.pop(op["src"], None)
            if key is None and "ino" in op:
                key, _ = self._inode(op["ino"])
            if "replaced" in op:
                _, old = self._inode(op["replaced"])
                old.location = op.get("keep")
            if key is not None:
                self.names[op["dst"]] = key
                self.inodes[key].location = op["dst"]
            if op["src"] in self.dirs:
                self.dirs.discard(op["src"])
                self.dirs.add(op["dst"])
        elif kind == "unlink":
            key = self.names.pop(op["path"], None)
            if key is not None and op.get("keep"):
                self.inodes[key].location = op["keep"]
        elif kind == "link":  # a second name for the same inode: the same data, torn or whole
            key, _ = self._inode(op["ino"])
            self.names[op["path"]] = key
        elif kind == "symlink":
            key, inode = self._inode(op["ino"])
            inode.link, inode.durable = op["target"], (0, 0)
            self.names[op["path"]] = key
        elif kind == "mkdir":
            self.dirs.add(op["path"])
        elif kind == "rmdir":
            self.dirs.discard(op["path"])
        return True

    def refusal(self, op: dict) -> Optional[Tuple[str, str, Optional[str]]]:
        """The path, the reason (``journal.Refusal.why``) and the link on the way when replaying ``op`` could lead a
        rebuild astray: a kept copy outside ``keeps`` (it would read whatever the job named); a name made inside a
        symbolic link, or a link made over a folder that holds names (it would write where the link leads); a file
        or a link made in place of a checkpoint folder itself (the rebuild makes that folder)."""
        keep = op.get("keep")
        if keep is not None and not (self.keeps and keep.startswith(self.keeps + os.sep)):
            return keep, "its kept copy is not in the agent's keep folder", None
        field = _MADE.get(op["op"])
        if field is None:
            return None
        path = op[field]
        parent = os.path.dirname(path)
        while parent != os.path.dirname(parent):
            if self._link(self.names.get(parent)):
                return path, "it is inside {link}, a symbolic link: a rebuild would write where the link leads", parent
            parent = os.path.dirname(parent)
        moved = self.names.get(op["src"], op.get("ino")) if op["op"] == "rename" else op.get("ino")
        if (op["op"] == "symlink" or self._link(moved)) and self._holds(path):
            return path, "it makes a symbolic link of a folder that holds files: a rebuild would write where it leads", None
        folder = op["op"] == "mkdir" or op["op"] == "rename" and op["src"] in self.dirs
        if path in self.roots and not folder:
            return path, "it puts a file or a link in place of a checkpoint folder", None
        return None

    def _link(self, key: Optional[Ino]) -> bool:
        inode = None if key is None else self.inodes.get((int(key[0]), int(key[1])))
        return inode is not None and inode.link is not None

    def _holds(self, path: str) -> bool:
        """Whether a name or a folder of the disk lies inside ``path``."""
        inside = path + os.sep
        return any(p.startswith(inside) for p in self.names) or any(d.startswith(inside) for d in self.dirs)

    def under_roots(self, path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in self.roots)

    def after_crash(self, model: Model, final: Optional["Disk"] = None) -> List[Entry]:
        """The files under the roots after a crash right now, with the data each holds; ``final`` is this
        disk replayed to the end of the journal, which knows where each inode's data is now."""
        final = final or self
        if model == "strict":
            names = self._strict_names()
        else:
            names = dict(self.names)
        entries = []
        for path, key in sorted(names.items()):
            if not self.under_roots(path):
                continue
            inode = self.inodes[key]
            if inode.link is not None:  # a name: it survives as the names do
                entries.append(Entry(path, None, 0, key, link=inode.link))
                continue
            if model == "none":
                version, length = inode.version, inode.size
            elif inode.durable is None:
                version, length = inode.version, 0
            else:
                version, length = inode.durable
            entries.append(Entry(path, final._source(key, version), length, key, version))
        return entries

    def _strict_names(self) -> Dict[str, Ino]:
        """Names that an fsync of their directory made durable, walking down from the roots."""
        out: Dict[str, Ino] = {}
        pending = list(self.roots)
        while pending:
            directory = pending.pop()
            for name, value in self.durable_names.get(directory, {}).items():
                if value == "dir":
                    pending.append(name)
                else:
                    out[name] = value
        return out

    def _source(self, key: Ino, version: int) -> Optional[str]:
        inode = self.inodes.get(key)
        if inode is None:
            return None
        return inode.kept.get(version) if version in inode.kept else inode.location

    def fork(self) -> "Disk":
        return copy.deepcopy(self)

    def relocated(self, move: Callable[[str], str]) -> "Disk":
        """The same disk with every path put where ``move`` says: a suite's shared run's journal mapped into a
        trial's own sandbox (``trial.shared``)."""
        disk = self.fork()
        disk.roots = [move(r) for r in self.roots]
        disk.dirs = {move(d) for d in self.dirs}
        disk.names = {move(p): key for p, key in self.names.items()}
        for inode in disk.inodes.values():
            inode.location = None if inode.location is None else move(inode.location)
            inode.kept = {v: move(p) for v, p in inode.kept.items()}
            if inode.link is not None and os.path.isabs(inode.link):
                inode.link = move(inode.link)
        disk.durable_names = {move(d): {move(p): v for p, v in listing.items()}
                              for d, listing in self.durable_names.items()}
        return disk

    def to_dict(self) -> Dict[str, object]:
        """The disk for ``json.dumps`` (inode numbers become lists): a suite keeps the start of a shared run's
        journal this way."""
        return {
            "roots": self.roots,
            "keeps": self.keeps,
            "ops_applied": self.ops_applied,
            "dirs": sorted(self.dirs),
            "names": dict(self.names),
            "inodes": [[list(k), i.version, i.size, list(i.durable) if i.durable else None, i.location,
                        [[v, p] for v, p in i.kept.items()], i.link] for k, i in self.inodes.items()],
            "durable_names": self.durable_names,
        }

    @classmethod
    def from_dict(cls, data: Dict) -> "Disk":
        disk = cls(data["roots"], data.get("keeps"))
        disk.ops_applied = data["ops_applied"]
        disk.dirs = set(data["dirs"])
        disk.names = {p: (k[0], k[1]) for p, k in data["names"].items()}
        for key, version, size, durable, location, kept, *link in data["inodes"]:
            disk.inodes[(key[0], key[1])] = Inode(version, size, (durable[0], durable[1]) if durable else None, location,
                                                   {v: p for v, p in kept}, *link)
        disk.durable_names = {d: {p: v if v == "dir" else (v[0], v[1]) for p, v in listing.items()}
                              for d, listing in data["durable_names"].items()}
        return disk


def materialize(entries: List[Entry], roots: Iterable[str], base: Union[str, Path], target_of=lambda p: p,
                keeps: Optional[str] = None) -> None:
    """Rewrite the roots to hold exactly ``entries`` (each at ``target_of(path)``); a root that is not there and
    holds no entry stays absent: no folder the crashed run never made. Every write lands beneath ``base``, through
    folders opened without following a link (``beneath``), and the data is read only from files beneath the roots
    or ``keeps``: a path that would lead elsewhere raises ``beneath.Escape``."""
    roots = [os.path.abspath(r) for r in roots]
    blobs: List[Tuple[str, Union[bytes, str]]] = []
    for entry in entries:
        data: Union[bytes, str] = b""
        if entry.link is not None:
            data = entry.link
        elif entry.length and entry.source:
            data = _read(entry.source, entry.length, [*roots, *([keeps] if keeps else [])])
        blobs.append((target_of(entry.path), data))
    top = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for root in roots:
            existed = _remove(top, _beneath(base, target_of(root)))
            if existed or any(e.path.startswith(root + os.sep) for e in entries):
                os.close(beneath.folder(top, _beneath(base, target_of(root)), make=True))
        for path, data in blobs:
            where = _beneath(base, path)
            folder = beneath.folder(top, os.path.dirname(where), make=True)
            try:
                if isinstance(data, str):
                    os.symlink(data, os.path.basename(where), dir_fd=folder)
                    continue
                fd = beneath.open_beneath(folder, os.path.basename(where), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                with open(fd, "wb") as f:
                    f.write(data)
            finally:
                os.close(folder)
    finally:
        os.close(top)


def _beneath(base: Union[str, Path], path: str) -> str:
    """``path`` relative to ``base``; an ``Escape`` when it is not lexically inside it."""
    where = os.path.relpath(path, base)
    if where == ".." or where.startswith(".." + os.sep):
        raise beneath.Escape(errno.EXDEV, f"it is not inside {base}", path)
    return where


def _remove(top: int, where: str) -> bool:
    """Remove what is at ``where`` beneath ``top`` (a folder and all it holds; a link, not what it leads to);
    whether there was anything. At ``.`` (a checkpoint folder that is the sandbox itself), what it holds."""
    if where == os.curdir:
        names = os.listdir(top)
        for name in names:
            _remove(top, name)
        return True
    try:
        folder = beneath.folder(top, os.path.dirname(where))
    except FileNotFoundError:
        return False
    name = os.path.basename(where)
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=folder)
        else:
            os.unlink(name, dir_fd=folder)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(folder)


def _read(source: str, length: int, folders: List[str]) -> bytes:
    """The first ``length`` bytes of the regular file ``source``, opened beneath the folder of ``folders`` it is
    in without following a link; nothing when it is in none of them, is gone, lies behind a link or is no regular
    file: whatever is there is not data the job wrote into its checkpoint folders."""
    home = next((f for f in folders if source.startswith(f + os.sep)), None)
    if home is None:
        return b""
    try:
        top = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        fd = beneath.open_beneath(top, os.path.relpath(source, home), os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, beneath.Escape):
        return b""
    finally:
        os.close(top)
    with open(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        chunks, left = [], min(length, os.fstat(fd).st_size)
        while left > 0:
            chunk = f.read(min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def missing_durability(disk: Disk, path: str, model: Model, name=lambda p: p) -> Optional[str]:
    """Why ``path``, as the job left it, does not survive the crash whole: every fsync it lacked, in one
    sentence (``name`` shows a path to the user); None when it survives."""
    key = disk.names.get(path)
    if key is None:
        return None
    inode = disk.inodes[key]
    if inode.link is not None:
        target = os.path.normpath(os.path.join(os.path.dirname(path), inode.link))
        pointed = disk.names.get(target)
        if pointed is None or disk.inodes[pointed].link is not None:  # a link to a link is not followed
            return None
        why = missing_durability(disk, target, model, name)
        return None if why is None else f"it links to {name(target)}, and {why}"
    missing = []
    if inode.durable is None or inode.durable != (inode.version, inode.size):
        durable = 0 if inode.durable is None or inode.durable[0] != inode.version else inode.durable[1]
        missing.append(f"its data was not fsynced ({durable} of {inode.size} bytes durable)")
    if model == "strict":
        missing += _missing_names(disk, path, key, name)
    return "; ".join(missing) or None


def _missing_names(disk: Disk, path: str, key: Ino, name) -> List[str]:
    """Under the strict model, the directory fsyncs ``path``'s name lacks: its own folder's after it was created
    or renamed, and the parent's of each folder above it that the job made and never made durable."""
    missing = []
    directory = os.path.dirname(path)
    if disk.durable_names.get(directory, {}).get(path) != key:
        missing.append(f"its name was not made durable: no fsync of {name(directory)}/ after it was created or renamed")
    while directory not in disk.roots and disk.under_roots(directory):
        parent = os.path.dirname(directory)
        if disk.durable_names.get(parent, {}).get(directory) != "dir":
            missing.append(f"the folder {name(directory)}/ it is in was made, but no fsync of {name(parent)}/ "
                           "followed")
        directory = parent
    return missing


def unseen(disk: Disk) -> List[str]:
    """Files under the roots that the journal never saw written: native code (safetensors, a C++ writer)
    wrote them, so no model can say what of them survives."""
    found = []
    for root in disk.roots:
        for parent, _, files in os.walk(root):
            for f in files:
                path = os.path.join(parent, f)
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) not in disk.inodes:
                    found.append(path)
    return sorted(found)


def as_left(path: str) -> Entry:
    """A file no model can judge (``unseen``), as the job left it: its data whole, or the link it is."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return Entry(path, None, 0, link=os.readlink(path))
    return Entry(path, path, st.st_size)


def power_cut(disk: Disk, ops: Iterable[dict], model: Model, roots: Iterable[str], base: Union[str, Path],
              final: Optional[Disk] = None, native: Optional[List[str]] = None) -> Tuple[List[Entry], List[str]]:
    """Replay ``ops`` over ``disk`` and rewrite ``roots`` (beneath ``base``, the sandbox) into what they hold when
    the power comes back; the entries written, and the files no model can judge (``unseen``), which are left as the
    job wrote them. A crash state rebuilt from a longer journal gives that journal's ``final`` disk (where the data
    is now) and its ``native`` files. The operations the disk refused are in ``disk.refused``."""
    for op in ops:
        disk.apply(op)
    entries = disk.after_crash(model, final=final)
    native = unseen(disk) if native is None else native
    entries += [as_left(path) for path in native]
    materialize(entries, roots, base, keeps=disk.keeps)
    return entries, native
