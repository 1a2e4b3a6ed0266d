"""POSIX access ACLs: just enough to let one user search (traverse) a directory.

Used when watchkeeper runs as root and must let its unprivileged PostgreSQL user
reach a data directory (or the PostgreSQL binaries) below a private directory
such as ``/root`` (mode 0700). Instead of opening that directory to everyone
with chmod, we add one named-user entry ``u:<user>:--x`` to its access ACL.

References:

* acl(5): the entry types, the mask rule and the access check algorithm that
  :func:`permits` follows.
* ``linux/include/uapi/linux/posix_acl_xattr.h``: the encoding of the
  ``system.posix_acl_access`` extended attribute, a little-endian ``u32``
  version (``POSIX_ACL_XATTR_VERSION`` = 2) followed by entries of
  ``(u16 e_tag, u16 e_perm, u32 e_id)``.
* ``linux/include/uapi/linux/posix_acl.h``: the tag values (:class:`Tag`).

When the ``setfacl`` program is installed we let it write the change; otherwise
we write the extended attribute ourselves with :func:`os.setxattr`.

Errors: :class:`OSError` from the file system (``ENOTSUP`` when it has no ACL
support, ``EPERM`` when we do not own the directory and are not root),
:class:`subprocess.CalledProcessError` from ``setfacl``, and
:class:`ValueError` for a malformed attribute value.
"""

from __future__ import annotations

import enum
import errno
import os
import shutil
import stat
import struct
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

XATTR_NAME = "system.posix_acl_access"
XATTR_VERSION = 2
UNDEFINED_ID = 0xFFFFFFFF  # ACL_UNDEFINED_ID: the id of entries that name no user or group

_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")


class Tag(enum.IntEnum):
    """ACL entry tag (``e_tag``), ordered as the kernel requires entries to be."""

    USER_OBJ = 0x01
    USER = 0x02
    GROUP_OBJ = 0x04
    GROUP = 0x08
    MASK = 0x10
    OTHER = 0x20


class Perm(enum.IntFlag):
    """ACL permission bits (``e_perm``)."""

    NONE = 0
    EXECUTE = 0x01
    WRITE = 0x02
    READ = 0x04


_NAMED = (Tag.USER, Tag.GROUP)
_GROUP_CLASS = (Tag.USER, Tag.GROUP_OBJ, Tag.GROUP)


@dataclass(frozen=True, order=True)
class Entry:
    """One ACL entry; ``id`` is a uid or gid for USER/GROUP, else UNDEFINED_ID."""

    tag: Tag
    id: int
    perm: Perm


def decode(data: bytes) -> tuple[Entry, ...]:
    """Parse a ``system.posix_acl_access`` value into entries, in stored order.

    Raises ValueError if the version is not 2 or the length is not 4 + 8*n bytes.
    """
    if len(data) < _HEADER.size or (len(data) - _HEADER.size) % _ENTRY.size:
        raise ValueError(f"ACL xattr of {len(data)} bytes is not 4 + 8*n bytes long")
    (version,) = _HEADER.unpack_from(data)
    if version != XATTR_VERSION:
        raise ValueError(f"ACL xattr version {version}, expected {XATTR_VERSION}")
    return tuple(
        Entry(Tag(tag), ident, Perm(perm))
        for tag, perm, ident in _ENTRY.iter_unpack(data[_HEADER.size :])
    )


def encode(entries: Iterable[Entry]) -> bytes:
    """Serialize entries as a ``system.posix_acl_access`` value, sorted by (tag, id)."""
    body = b"".join(_ENTRY.pack(e.tag, e.perm, e.id) for e in sorted(entries))
    return _HEADER.pack(XATTR_VERSION) + body


def from_mode(mode: int) -> tuple[Entry, ...]:
    """The minimal ACL (owner, group, other) equivalent to the permission bits of `mode`."""
    return (
        Entry(Tag.USER_OBJ, UNDEFINED_ID, Perm((mode >> 6) & 7)),
        Entry(Tag.GROUP_OBJ, UNDEFINED_ID, Perm((mode >> 3) & 7)),
        Entry(Tag.OTHER, UNDEFINED_ID, Perm(mode & 7)),
    )


def with_user_perm(entries: Sequence[Entry], uid: int, perm: Perm) -> tuple[Entry, ...]:
    """Add `perm` to the named-user entry for `uid` (creating it), then recompute the mask.

    Existing permissions of that entry are kept. The mask becomes the union of the
    group-class entries (named users, owning group, named groups), as ``setfacl -m``
    does, so no entry loses access it had before. Returns entries sorted by (tag, id).
    """
    old = next((e for e in entries if e.tag is Tag.USER and e.id == uid), None)
    merged = Entry(Tag.USER, uid, perm | (old.perm if old else Perm.NONE))
    kept = [e for e in entries if e is not old and e.tag is not Tag.MASK]
    return tuple(sorted([*kept, merged, _mask_for(kept + [merged])]))


def _mask_for(entries: Sequence[Entry]) -> Entry:
    """The MASK entry granting exactly the union of the group-class permissions."""
    union = Perm.NONE
    for entry in entries:
        if entry.tag in _GROUP_CLASS:
            union |= entry.perm
    return Entry(Tag.MASK, UNDEFINED_ID, union)


def permits(
    entries: Sequence[Entry],
    *,
    owner: tuple[int, int],
    uid: int,
    gids: frozenset[int],
    want: Perm,
) -> bool:
    """Whether a non-root process (`uid`, groups `gids`) gets `want`, per acl(5).

    `owner` is the file's (st_uid, st_gid). Follows the ACCESS CHECK ALGORITHM of
    acl(5): owner entry, then named users (masked), then the owning and named
    groups (masked; a matching group entry without `want` denies), then other.
    """
    by_tag = {e.tag: e for e in entries if e.tag not in _NAMED}
    if uid == owner[0]:
        return want in by_tag[Tag.USER_OBJ].perm
    mask = by_tag[Tag.MASK].perm if Tag.MASK in by_tag else Perm(7)
    for entry in entries:
        if entry.tag is Tag.USER and entry.id == uid:
            return want in (entry.perm & mask)
    groups = [by_tag[Tag.GROUP_OBJ]] if owner[1] in gids else []
    groups += [e for e in entries if e.tag is Tag.GROUP and e.id in gids]
    if groups:
        return any(want in (e.perm & mask) for e in groups)
    return want in by_tag[Tag.OTHER].perm


def read(path: Path) -> tuple[Entry, ...]:
    """The access ACL of `path`: its xattr, or the minimal ACL of its mode if it has none.

    Raises OSError (ENOTSUP if the file system lacks ACL support) or ValueError.
    """
    try:
        return decode(os.getxattr(path, XATTR_NAME))
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
    return from_mode(os.stat(path).st_mode)


def can_search(path: Path, uid: int, gids: frozenset[int]) -> bool:
    """Whether user `uid` with groups `gids` may traverse directory `path`."""
    st = os.stat(path)
    owner = (st.st_uid, st.st_gid)
    return permits(read(path), owner=owner, uid=uid, gids=gids, want=Perm.EXECUTE)


def grant_search(path: Path, uid: int) -> None:
    """Give user `uid` search permission on directory `path` with a named-user ACL entry.

    Uses ``setfacl -m u:<uid>:<perm>`` when installed, else writes the xattr.
    Raises OSError, subprocess.CalledProcessError or ValueError (see module doc).
    """
    entries = with_user_perm(read(path), uid, Perm.EXECUTE)
    setfacl = shutil.which("setfacl")
    if setfacl is None:
        os.setxattr(path, XATTR_NAME, encode(entries))
        return
    perm = next(e.perm for e in entries if e.tag is Tag.USER and e.id == uid)
    spec = f"u:{uid}:{perm_text(perm)}"
    subprocess.run([setfacl, "-m", spec, "--", str(path)], check=True, capture_output=True)


def grant_search_along(path: Path, uid: int, gids: frozenset[int]) -> list[Path]:
    """Let `uid` traverse every directory from ``/`` down to `path` (inclusive).

    `path` must be absolute and free of symlinks (pass ``Path.resolve()``).
    Only directories the user cannot already search get an entry; nothing is
    chmod-ed. Returns the directories changed, outermost first.
    """
    if not path.is_absolute():
        raise ValueError(f"{path} is not absolute")
    granted = []
    for directory in [*reversed(path.parents), path]:
        if not stat.S_ISDIR(os.stat(directory).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
        if not can_search(directory, uid, gids):
            grant_search(directory, uid)
            granted.append(directory)
    return granted


def perm_text(perm: Perm) -> str:
    """Render permissions as ``getfacl`` does, e.g. ``r-x``."""
    return "".join(
        letter if bit in perm else "-"
        for letter, bit in (("r", Perm.READ), ("w", Perm.WRITE), ("x", Perm.EXECUTE))
    )
