"""Where a data dir or a corpus is: a local directory or an ``s3://bucket/prefix`` URL.

One filesystem layer serves both, pyarrow's (``LocalFileSystem``, ``S3FileSystem``): it installs with
the package, so nothing is downloaded at run time. The S3 endpoint, region and credentials come from the
standard AWS variables and files: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (any S3-compatible
store), ``AWS_REGION`` or ``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared config and credentials files.

Objects appear whole: a file is written on local disk first and uploaded in one ``PUT`` (or a multipart
upload, which S3 also makes visible only once complete), so a reader never sees part of one. Temporary
files, write-ahead logs and staging directories stay on local disk. DuckDB scans a remote location
through the same filesystem (:meth:`Location.register_with`), polars through its own object-store client
configured from the same variables (:meth:`Location.polars_options`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tailcut.exporters._errors import DataDirError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.fs as pafs

#: URL schemes a location may have (anything else with ``://`` is refused, not guessed at).
REMOTE_SCHEMES: Final = ("s3",)


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is a URL (``s3://...``) rather than a local path."""
    scheme, sep, _ = os.fspath(location).partition("://")
    return bool(sep) and scheme.isalnum() and scheme.lower() != "file"


@dataclass(frozen=True)
class Location:
    """A directory on local disk or under an object-store prefix.

    Attributes
    ----------
    url
        What users see and DuckDB globs: an absolute local path, or ``s3://bucket/prefix``.
    path
        The same place as a path of :attr:`filesystem` (``bucket/prefix`` for S3).
    """

    url: str
    path: str

    @property
    def remote(self) -> bool:
        return is_remote(self.url)

    @property
    def filesystem(self) -> pafs.FileSystem:
        """pyarrow's filesystem for this location."""
        return _s3() if self.remote else _local()

    def __str__(self) -> str:
        return self.url

    def child(self, *names: str) -> Location:
        """A location under this one."""
        suffix = "/".join(names)
        return Location(f"{self.url}/{suffix}", f"{self.path}/{suffix}")

    def local_path(self) -> Path:
        """The local directory (only for a local location)."""
        assert not self.remote, self.url
        return Path(self.path)

    def exists(self) -> bool:
        """Whether anything is there (for S3: any object under the prefix)."""
        import pyarrow.fs as pafs

        if not self.remote:
            return Path(self.path).exists()
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=False)
        return bool(self.filesystem.get_file_info(selector))

    def is_file(self, name: str) -> bool:
        import pyarrow.fs as pafs

        return self.filesystem.get_file_info(f"{self.path}/{name}").type == pafs.FileType.File

    def files(self, under: str = "", suffix: str = ".parquet") -> list[str]:
        """Every file below ``under`` whose name ends with ``suffix``, as filesystem paths, sorted.

        Hidden names (a writer's ``.part-*.tmp``) are skipped.
        """
        import pyarrow.fs as pafs

        base = f"{self.path}/{under}".rstrip("/")
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
        found = [
            info.path
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File
            and info.base_name.endswith(suffix)
            and not info.base_name.startswith(".")
        ]
        return sorted(found)

    def check_reachable(self) -> None:
        """Raise :class:`DataDirError` when a remote location's bucket does not exist or cannot be read.

        Readers call this before they conclude that a location holds no files: a listing of a missing
        bucket is empty, and "no files" would blame the data instead of the URL. Local: nothing to check.
        """
        import pyarrow.fs as pafs

        if not self.remote:
            return
        bucket = self.path.split("/", 1)[0]
        try:
            found = self.filesystem.get_file_info(bucket).type
        except OSError as exc:
            raise DataDirError(f"{self.url}: cannot reach the object store ({_first_line(exc)})") from None
        if found == pafs.FileType.NotFound:
            raise DataDirError(
                f"{self.url}: bucket {bucket!r} does not exist "
                "(create it, or check the URL and AWS_ENDPOINT_URL)"
            )

    def check_writable(self) -> None:
        """Create and delete a small probe file here; :class:`DataDirError` naming why that failed.

        A collector calls this at start and while it recovers from a write fault, so that a bucket that
        does not exist, a read-only prefix or missing credentials are reported at once, and "writing works
        again" is said only once a write has succeeded.
        """
        import uuid

        self.check_reachable()
        probe = f"{self.path}/.tailcut-probe-{uuid.uuid4().hex}"
        filesystem = self.filesystem
        try:
            if not self.remote:
                filesystem.create_dir(self.path, recursive=True)
            with filesystem.open_output_stream(probe) as stream:
                stream.write(b"tailcut")
            filesystem.delete_file(probe)
        except OSError as exc:
            raise DataDirError(f"{self.url}: cannot write there ({_first_line(exc)})") from None

    def upload(self, local: Path, name: str) -> None:
        """Copy a finished local file to ``name`` under this (remote) location, whole."""
        with local.open("rb") as source, self.filesystem.open_output_stream(f"{self.path}/{name}") as target:
            shutil.copyfileobj(source, target, 8 * 1024 * 1024)

    def register_with(self, connection: duckdb.DuckDBPyConnection) -> None:
        """Let DuckDB read this location's URLs: a remote one through pyarrow's filesystem (via fsspec's
        wrapper), so DuckDB needs no extension of its own."""
        if not self.remote:
            return
        from fsspec.implementations.arrow import ArrowFSWrapper

        class _S3(ArrowFSWrapper):  # type: ignore[misc]
            protocol = "s3"

        connection.register_filesystem(_S3(self.filesystem))

    def polars_options(self) -> dict[str, str] | None:
        """``storage_options`` for polars' object-store reader (None for a local location)."""
        if not self.remote:
            return None
        options: dict[str, str] = {}
        endpoint = _endpoint()
        if endpoint:
            options["aws_endpoint_url"] = endpoint
            if endpoint.startswith("http://"):
                options["aws_allow_http"] = "true"
        region = _region()
        if region:
            options["aws_region"] = region
        return options


def read_table(
    place: Location, table: str, columns: Sequence[str], where: pc.Expression | None = None
) -> pa.Table:
    """``columns`` of a data dir's ``table`` (rows matching ``where``), from files of any schema version.

    Each file is read with the columns it has and brought to today's schema
    (:func:`tailcut.exporters.schema.upgrade`), so files written before a column existed still read.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    from tailcut.exporters import schema

    files = place.files(table)
    parts = [schema.upgrade(table, schema.TABLES[table].empty_table()).select(list(columns))]
    for fragment in ds.dataset(files, filesystem=place.filesystem, format="parquet").get_fragments():
        have = [c for c in columns if c in fragment.physical_schema.names]
        part = schema.upgrade(table, fragment.to_table(columns=have, filter=where))
        parts.append(part.select(list(columns)))
    return pa.concat_tables(parts)


def location(text: str | os.PathLike[str]) -> Location:
    """Parse a data dir or corpus path: an ``s3://bucket/prefix`` URL, or a local path (made absolute).

    Raises
    ------
    DataDirError
        For a URL of another scheme, or an ``s3://`` URL without a bucket.
    """
    raw = os.fspath(text)
    if raw.startswith("file://"):
        raw = raw[len("file://") :]
    if not is_remote(raw):
        try:
            local = Path(raw).expanduser()
        except RuntimeError:  # "~name" of no such user: the path as written
            local = Path(raw)
        absolute = str(local.absolute())
        return Location(absolute, absolute)
    scheme, _, rest = raw.partition("://")
    shown = raw if raw.isprintable() else repr(raw)
    if scheme.lower() not in REMOTE_SCHEMES:
        raise DataDirError(
            f"{shown}: unsupported URL scheme {scheme!r}; a data dir is a path or s3://bucket/prefix"
        )
    if rest.startswith("/") or not rest.strip("/"):
        raise DataDirError(f"{shown}: an s3:// location needs a bucket (s3://bucket/prefix)")
    rest = rest.rstrip("/")
    return Location(f"s3://{rest}", rest)


def upload_directory(local: Path, target: Location, *, last: tuple[str, ...] = ()) -> None:
    """Upload every file of a finished local directory under the remote ``target``, each object whole.

    The names in ``last`` go after the others, so a reader who finds a manifest finds the files it lists.
    """
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    for name in sorted(names, key=lambda n: (n in last, last.index(n) if n in last else 0)):
        target.upload(local / name, name)


@contextmanager
def local_directory(source: Location) -> Iterator[Path]:
    """A local directory holding ``source``'s files: itself, or a temporary copy of a remote one."""
    if not source.remote:
        yield source.local_path()
        return
    staging = Path(tempfile.mkdtemp(prefix="tailcut-download-"))
    try:
        for path in source.files(suffix=""):
            name = path[len(source.path) + 1 :]
            local = staging / name
            local.parent.mkdir(parents=True, exist_ok=True)
            with source.filesystem.open_input_stream(path) as stream, local.open("wb") as out:
                shutil.copyfileobj(stream, out, 8 * 1024 * 1024)
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


@cache
def _local() -> pafs.FileSystem:
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem()


def _s3() -> pafs.FileSystem:
    return _s3_for(_endpoint(), _region(), os.environ.get("AWS_PROFILE"))


@cache
def _s3_for(endpoint: str | None, region: str | None, profile: str | None) -> pafs.FileSystem:
    """pyarrow's S3 filesystem for these settings (credentials: the AWS SDK's default chain)."""
    import pyarrow.fs as pafs

    del profile  # part of the cache key: the SDK reads AWS_PROFILE itself
    return pafs.S3FileSystem(endpoint_override=endpoint, region=region)
