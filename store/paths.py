"""The store's path guard (pure; no trio): every path the store or the broker's config managers
derive from a name (a topic, a queue id, a group, a config file name) is built here, and only
inside the store root.

``StoreRoot(root).child(*parts)`` joins name components under the root. A component is refused
(``StorePathError``) when it is empty, ``.`` or ``..``, absolute, longer than a file name may be,
or holds ``/``, ``\\`` or NUL; the joined path is refused when its real path (every symlink that
exists resolved) is not strictly inside the root's real path. ``is_valid_component`` is the
string half alone (no file system access), for hot paths that validate once per name and cache.
"""

from __future__ import annotations

import os
from typing import Final

import attrs

#: NAME_MAX on Linux file systems: a longer component fails with ENAMETOOLONG anyway
MAX_COMPONENT_BYTES: Final = 255
_FORBIDDEN_CHARS: Final = ("/", "\\", "\0")


class StorePathError(ValueError):
    """A name that would put a store path outside the store root (or is no file name)."""


def component_problem(part: object) -> str | None:
    """Why ``part`` cannot be one path component, or None when it can."""
    if not isinstance(part, str):
        return f"path component must be text, not {type(part).__name__}"
    if not part:
        return "empty path component"
    if part in (".", ".."):
        return f"path component {part!r} is not a name"
    for ch in _FORBIDDEN_CHARS:
        if ch in part:
            return f"path component {part[:64]!r} contains {ch!r}"
    try:
        size = len(part.encode("utf-8"))
    except UnicodeEncodeError:
        return f"path component {part[:64]!r} is not valid UTF-8 text"
    if size > MAX_COMPONENT_BYTES:
        return f"path component of {size} bytes exceeds {MAX_COMPONENT_BYTES}"
    if os.path.isabs(part):  # covers platforms with other separators
        return f"path component {part[:64]!r} is absolute"
    return None


def is_valid_component(part: str) -> bool:
    return component_problem(part) is None


def _inside(root: str, path: str) -> bool:
    """``path`` is strictly below ``root`` (both absolute and normalised)."""
    return path != root and os.path.commonpath((root, path)) == root


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


@attrs.frozen
class StoreRoot:
    """A directory every derived path must stay strictly inside (symlinks resolved)."""

    #: the root's real path (absolute, symlinks resolved when the guard was made)
    path: str = attrs.field(converter=_real)

    def child(self, *parts: str) -> str:
        """``root/part/...`` when every part is one valid name and the result's real path is
        strictly inside the root; raises StorePathError otherwise. Returns the real path."""
        if not parts:
            raise StorePathError("no path components")
        for part in parts:
            problem = component_problem(part)
            if problem is not None:
                raise StorePathError(problem)
        return self.check(os.path.join(self.path, *parts))

    def check(self, path: str) -> str:
        """The real path of ``path`` if it is strictly inside the root, else StorePathError."""
        real = os.path.realpath(os.path.abspath(path))
        if not _inside(self.path, real):
            raise StorePathError(f"{path!r} resolves outside the store root {self.path!r}")
        return real

    def sub(self, *parts: str) -> StoreRoot:
        """The guard for a directory below this root (checked like ``child``)."""
        return StoreRoot(self.child(*parts))
