"""Files that appear whole or not at all: the one home of write-to-a-temporary-name-then-rename.

Every writer of a file or directory another process may read (a data dir's Parquet parts, the payload
store, a corpus, a report, a findings or results file) writes it under a temporary dot name in the same
directory, flushes it to stable storage, renames it over the final name and flushes the directory, so a
reader sees the old file, the new one, or none, never half of one, even across ``kill -9`` or a power cut.
If the writing fails, the temporary is removed and the target is left as it was.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> target = Path(tempfile.mkdtemp()) / "report.txt"
>>> with replacing(target) as temporary:
...     _ = temporary.write_text("whole")
>>> target.read_text()
'whole'
>>> try:
...     with replacing(target) as temporary:
...         _ = temporary.write_text("half")
...         raise RuntimeError("disk full")
... except RuntimeError:
...     pass
>>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
('whole', ['report.txt'])
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's) contents to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    if path.is_dir():
        for child in path.rglob("*"):
            if child.is_file():
                fsync_path(child)
    fsync_path(path)


def publish(temporary: Path, final: Path) -> None:
    """Make a finished temporary file or directory visible under its final name, durably.

    A directory replaces only an absent or empty ``final`` (``os.replace`` refuses a full one).
    """
    _fsync_tree(temporary)
    os.replace(temporary, final)
    fsync_path(final.parent)


def temporary_name(final: Path, tag: str = "") -> Path:
    """A dot name beside ``final`` that no glob of its kind matches, unique to this process."""
    return final.with_name(f".{final.name}.{tag or os.getpid()}.tmp")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def replacing(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``target`` to write; on success it replaces ``target`` atomically.

    With ``directory`` the temporary is an empty directory created for the caller to fill. On an
    exception inside the block the temporary is removed, ``target`` is untouched, and the exception
    propagates. The parent directory is created if missing.
    """
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_name(final)
    _remove(temporary)  # left by an earlier process with this pid
    if directory:
        temporary.mkdir()
    try:
        yield temporary
        publish(temporary, final)
    except BaseException:
        _remove(temporary)
        raise
