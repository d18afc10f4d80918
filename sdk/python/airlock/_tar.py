"""Tar streams: making them for uploads, and extracting downloads with the
Go SDK's rules (client/extract.go): only files, directories and symbolic
links; no absolute names or ".."; nothing written through a link; a link
is made only if it leads within its tree, the others are left out and
listed; the archive and its files are bounded by a size; everything lands
in a temporary directory first, so a failure leaves nothing behind."""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any, Dict, List, Optional

from . import errors

#: Links followed in resolving one (Linux's own bound).
MAX_HOPS = 40
#: The top-level name of a single download whose entries are relative to
#: the directory archived (a download of /).
DOT_TOP = "root"


@dataclass
class SkippedLink:
    """A symbolic link an extraction did not create: name is the local
    path it would have had, target what it pointed to."""

    name: str
    target: str


@dataclass
class Extracted:
    """What an extraction left out."""

    skipped_links: List[SkippedLink] = field(default_factory=list)


class _Count:
    """Counts the bytes read through it and refuses more than limit."""

    def __init__(self, r: Any, limit: int) -> None:
        self.r, self.n, self.limit = r, 0, limit

    def read(self, n: int = -1) -> bytes:
        b = self.r.read(n)
        self.n += len(b)
        if self.n > self.limit:
            raise _too_large(self.limit)
        return b


def _too_large(limit: int) -> errors.TooLarge:
    return errors.TooLarge(f"the archive holds more than {limit} bytes, the limit: raise it (max_size)")


def _entry_name(n: str) -> str:
    if not n:
        raise ValueError("empty name")
    if "\x00" in n:
        raise ValueError("NUL in name")
    if n.startswith("/"):
        raise ValueError("absolute path refused")
    if any(p == ".." for p in n.split("/")):
        raise ValueError('".." refused')
    return posixpath.normpath(n)


class _Extraction:
    def __init__(self, root: str, single: bool) -> None:
        self.root, self.single = root, single
        self.top = ""
        self.dot = False
        self.links: Dict[str, Dict[str, Any]] = {}
        self.order: List[str] = []
        self.dirs: Dict[str, int] = {}
        self.skipped: List[SkippedLink] = []

    def p(self, name: str) -> str:
        return os.path.join(self.root, *name.split("/"))

    def run(self, fileobj: Any, limit: int) -> None:
        cr = _Count(fileobj, limit)
        content = 0
        try:
            tf = tarfile.open(fileobj=cr, mode="r|")  # type: ignore[call-overload]
        except tarfile.TarError as e:
            raise errors.StreamError(f"airlock: untar: {e}") from None
        with tf:
            while True:
                try:
                    m = tf.next()
                except tarfile.TarError as e:
                    raise errors.StreamError(f"airlock: untar: {e}") from None
                if m is None:
                    break
                try:
                    content = self.entry(tf, m, content, limit)
                except (tarfile.TarError, EOFError) as e:
                    raise errors.StreamError(f"airlock: untar: entry {m.name!r}: {e}") from None
        self.make_links()

    def entry(self, tf: tarfile.TarFile, m: tarfile.TarInfo, content: int, limit: int) -> int:
        def fail(why: str) -> errors.StreamError:
            return errors.StreamError(f"airlock: untar: entry {m.name!r}: {why}")

        try:
            name = _entry_name(m.name)
        except ValueError as e:
            raise fail(str(e)) from None
        if name == ".":
            if not m.isdir():
                raise fail("not a directory")
            if self.single and not self.top:
                self.dot, self.top = True, DOT_TOP
                os.mkdir(self.p(DOT_TOP), 0o700)
                self.dirs[DOT_TOP] = m.mode & 0o777
            return content
        if self.dot:
            name = posixpath.join(DOT_TOP, name)
        top = name.split("/", 1)[0]
        if not self.top:
            self.top = top
        elif self.single and top != self.top:
            raise fail(f"a second top-level entry (after {self.top!r}): a download is one file or one tree")
        d = posixpath.dirname(name)
        while d:
            l = self.links.get(d)
            if l is not None and not l["replaced"]:
                raise fail(f"{d} is a symbolic link: nothing is written through one")
            d = posixpath.dirname(d)
        d = posixpath.dirname(name)
        if d:
            os.makedirs(self.p(d), 0o755, exist_ok=True)
        if name in self.links:
            self.links[name]["replaced"] = True
        mode = m.mode & 0o777
        path = self.p(name)
        if m.isdir():
            if os.path.lexists(path) and not (os.path.isdir(path) and not os.path.islink(path)):
                os.remove(path)
            if not os.path.lexists(path):
                os.mkdir(path, 0o700)
            self.dirs[name] = mode
        elif m.isreg():
            content += m.size
            if content > limit:
                raise _too_large(limit)
            _replace(path)
            src = tf.extractfile(m)
            assert src is not None
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                left = m.size
                hole = False
                while left > 0:
                    b = src.read(min(left, 1 << 20))
                    if not b:
                        raise fail("the archive was cut")
                    left -= len(b)
                    if b.count(0) == len(b) and len(b) >= 4096:
                        f.seek(len(b), os.SEEK_CUR)  # a hole
                        hole = True
                    else:
                        f.write(b)
                if hole:
                    f.truncate(m.size)
            os.chmod(path, mode)
            if m.mtime:
                os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)
        elif m.issym():
            if not m.linkname or "\x00" in m.linkname:
                raise fail("bad symbolic link target")
            _replace(path)
            if name not in self.links:
                self.order.append(name)
            self.links[name] = {"target": m.linkname, "replaced": False, "skipped": False}
        else:
            raise fail(f"unsupported entry type {m.type!r} (only files, directories and symbolic links)")
        return content

    def make_links(self) -> None:
        changed = True
        while changed:
            changed = False
            for name in self.order:
                l = self.links[name]
                if l["replaced"] or l["skipped"]:
                    continue
                if not self.leads_inside(name):
                    l["skipped"] = True
                    changed = True
        for name in self.order:
            l = self.links[name]
            if l["replaced"]:
                continue
            if l["skipped"]:
                self.skipped.append(SkippedLink(name, l["target"]))
                continue
            os.symlink(l["target"], self.p(name))

    def leads_inside(self, name: str) -> bool:
        top, sep, rest = name.partition("/")
        if not sep:
            return False
        target = self.links[name]["target"]
        if target.startswith("/"):
            return False
        d = posixpath.dirname(rest)
        cur: List[str] = d.split("/") if d else []
        pending = target.split("/")
        missing = False
        hops = 0
        while pending:
            c = pending.pop(0)
            if c in ("", "."):
                continue
            if c == "..":
                if not cur or missing:
                    return False
                cur = cur[:-1]
                continue
            nxt = cur + [c]
            if missing:
                cur = nxt
                continue
            full = posixpath.join(top, *nxt)
            l = self.links.get(full)
            if l is not None and not l["replaced"]:
                if l["skipped"] or l["target"].startswith("/"):
                    return False
                hops += 1
                if hops > MAX_HOPS:
                    return False
                pending = l["target"].split("/") + pending
                continue
            p = self.p(full)
            if not (os.path.isdir(p) and not os.path.islink(p)):
                missing = True
            cur = nxt
        return True


def _replace(path: str) -> None:
    if os.path.lexists(path) and not (os.path.isdir(path) and not os.path.islink(path)):
        os.remove(path)


def _is_dir(p: str) -> bool:
    st = os.lstat(p)
    return stat.S_ISDIR(st.st_mode)


def _check_place(frm: str, to: str) -> None:
    try:
        tst = os.lstat(to)
    except FileNotFoundError:
        return
    fdir = _is_dir(frm)
    if stat.S_ISLNK(tst.st_mode) and fdir:
        raise errors.StreamError(f"airlock: {to} is a symbolic link where the download has a directory: nothing is written through one")
    if stat.S_ISDIR(tst.st_mode) and not fdir:
        raise errors.StreamError(f"airlock: {to} is a directory where the download has a file")
    if not stat.S_ISDIR(tst.st_mode):
        return
    for e in os.listdir(frm):
        _check_place(os.path.join(frm, e), os.path.join(to, e))


def _move_place(frm: str, to: str) -> None:
    try:
        tst = os.lstat(to)
    except FileNotFoundError:
        os.rename(frm, to)
        return
    fdir = _is_dir(frm)
    if stat.S_ISDIR(tst.st_mode) and fdir:
        for e in os.listdir(frm):
            _move_place(os.path.join(frm, e), os.path.join(to, e))
        return
    if not fdir:
        os.rename(frm, to)  # replaces the file or link at once
        return
    os.remove(to)
    os.rename(frm, to)


def _chmod(path: str, mode: int) -> None:
    if not os.path.islink(path):
        os.chmod(path, mode)


def untar_to(dst: str, fileobj: Any, max_size: int = 1 << 30) -> Extracted:
    """Extract a tar stream into the existing directory dst with the rules
    above (several top-level entries allowed)."""
    if not os.path.isdir(dst) or os.path.islink(dst):
        raise errors.AirlockError(f"airlock: untar: {dst} is not a directory")
    tmp = tempfile.mkdtemp(prefix=".airlock-untar-", dir=dst)
    try:
        x = _Extraction(tmp, single=False)
        x.run(fileobj, max_size)
        tops = os.listdir(tmp)
        for t in tops:
            _check_place(os.path.join(tmp, t), os.path.join(dst, t))
        for t in tops:
            _move_place(os.path.join(tmp, t), os.path.join(dst, t))
        for name in sorted(x.dirs, key=lambda n: -n.count("/")):
            _chmod(os.path.join(dst, *name.split("/")), x.dirs[name])
        return Extracted([SkippedLink(os.path.join(dst, *s.name.split("/")), s.target) for s in x.skipped])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_destination(dst: str) -> None:
    parent, base = os.path.split(os.path.abspath(dst)) if dst else ("", "")
    if dst.rstrip("/") != dst and dst != "/" or base in ("", ".", ".."):
        raise errors.AirlockError(f"airlock: download to {dst}: name the copy (a path whose last part is not {base!r})")
    if os.path.islink(dst):
        raise errors.AirlockError(
            f"airlock: download to {dst}: it is a symbolic link (to {os.readlink(dst)}), which a download neither "
            "writes through nor replaces: remove it, or name the directory it points to")
    if not os.path.isdir(parent):
        raise errors.AirlockError(f"airlock: download to {dst}: {parent} is not a directory")


def download_to(r: Any, remote: str, dst: str, limit: int) -> Extracted:
    """Extract the download r of remote to dst (see Client.download_to)."""
    check_destination(dst)
    dst = os.path.abspath(dst)
    parent, base = os.path.split(dst)
    tmp = tempfile.mkdtemp(prefix=".airlock-download-", dir=parent)
    try:
        x = _Extraction(tmp, single=True)
        try:
            x.run(r, limit)
            _drain(r)
        except errors.APIError:
            raise
        except (errors.AirlockError, OSError) as e:
            _drain(r)
            trailer = _trailer_error(r)
            if trailer is not None:
                raise trailer from None
            raise e
        trailer = _trailer_error(r)
        if trailer is not None:
            raise trailer
        if not x.top:
            raise errors.StreamError(f"airlock: download of {remote}: the archive is empty")
        frm = os.path.join(tmp, x.top)
        if not os.path.lexists(frm):
            raise errors.StreamError(f"airlock: download of {remote}: the archive is a symbolic link that was left out ({x.top})")
        _check_place(frm, dst)
        _move_place(frm, dst)

        def under(name: str) -> str:
            return os.path.join(dst, *name[len(x.top):].split("/"))

        for name in sorted(x.dirs, key=lambda n: -n.count("/")):
            _chmod(under(name), x.dirs[name])
        return Extracted([SkippedLink(under(s.name), s.target) for s in x.skipped])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _drain(r: Any) -> None:
    try:
        for _ in range(4096):
            if not r.read(64 << 10):
                break
    except errors.AirlockError:
        pass


def _trailer_error(r: Any) -> Optional[errors.APIError]:
    t = getattr(r, "trailers", None) or {}
    v = t.get("x-airlock-error")
    if not v:
        return None
    import json
    try:
        d = json.loads(v)
    except ValueError:
        return errors.StreamError(f"airlock: download failed: {v[:200]}")  # type: ignore[return-value]
    return errors.make_error(str(d.get("code") or "internal"), str(d.get("message") or v))


def tar_dir(w: IO[bytes], src: str) -> None:
    """Write a tar stream of the local file or tree src to w, named under
    its base name; links are stored as links, sockets/devices/FIFOs skipped."""
    src = os.path.abspath(src)
    name = os.path.basename(src.rstrip("/")) or "root"

    def keep(ti: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        if not (ti.isreg() or ti.isdir() or ti.issym()):
            return None
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    with tarfile.open(fileobj=w, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        tf.add(src, arcname=name, recursive=True, filter=keep)
