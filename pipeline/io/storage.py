"""Where crawl output lives: the one place that creates, reads, lists, renames and deletes files
by path, for local directories and `gs://bucket/prefix` roots alike.

This module owns the difference between the two kinds of storage, so that segments and the
pages table are written the same way on both. It does not decide names or layouts (its callers
do) and it does not decide when data must be durable (callers call make_durable()).

The difference that shapes everything: a local file can be appended to and made durable in
place (fsync), while a GCS object appears whole when its upload completes and can never be
appended to. So a NewFile on GCS is held in memory and uploaded by make_durable(), after which
it is finished; a local NewFile stays open for more appends after each fsync. Either way, data
written before make_durable() returned is readable at the same path and offset afterwards, and
nothing at a GCS path is visible before then (an upload that fails leaves no object).

gs:// paths go through Beam's FileSystems, so the crawler uses the same GCS client, retries
and pipeline options (credentials, impersonation) as the rest of the pipeline; local paths use
plain files, without importing Beam. With STORAGE_EMULATOR_HOST set (tests, local runs against
an emulator) the first GCS access in a process calls use_storage_emulator(), which skips Beam's
~22 s search for credentials the emulator does not need.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import BinaryIO

log = logging.getLogger(__name__)

GCS_SCHEME = "gs://"
_EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"


class StorageError(OSError):
    """A storage operation failed; str says which path and what to do."""


def is_gcs(path: str) -> bool:
    """True for `gs://bucket/...` paths."""
    return path.startswith(GCS_SCHEME)


def join(root: str, *parts: str) -> str:
    """`root` and `parts` joined with the separator of root's storage."""
    if is_gcs(root):
        return "/".join([root.rstrip("/"), *(part.strip("/") for part in parts)])
    return os.path.join(root, *parts)


def parent(path: str) -> str:
    """The directory (or GCS prefix) holding `path`."""
    return path.rsplit("/", 1)[0] if is_gcs(path) else os.path.dirname(path)


def name(path: str) -> str:
    """The last part of `path` (file or object name without its directory)."""
    return path.rsplit("/", 1)[-1] if is_gcs(path) else os.path.basename(path)


# --- Writing ------------------------------------------------------------------------------


class NewFile(ABC):
    """A file being written at `path`; readers may rely on its bytes only after make_durable().

    `appendable` says whether writing may go on after make_durable(): True for local files,
    False for GCS objects (finished by their upload).
    """

    path: str
    appendable: bool

    @property
    @abstractmethod
    def size(self) -> int:
        """Bytes written so far (durable or not)."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Append `data`."""

    @abstractmethod
    def make_durable(self) -> None:
        """Make every byte written so far survive a crash of this process (and, on GCS,
        visible to readers). Raises StorageError (or the OSError) if it could not; nothing
        may be relied on then, and calling it again retries."""

    @abstractmethod
    def close(self) -> None:
        """Release the file. Does NOT make pending bytes durable: call make_durable() first."""


class _LocalFile(NewFile):
    appendable = True

    def __init__(self, path: str, handle: BinaryIO) -> None:
        self.path = path
        self._handle = handle
        self._size = 0
        self._entry_synced = False  # the directory entry of a new file needs a sync once

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes) -> None:
        self._handle.write(data)
        self._size += len(data)

    def make_durable(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        if not self._entry_synced:
            # The file's directory entry must survive a crash too.
            directory = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            self._entry_synced = True

    def close(self) -> None:
        self._handle.close()


class _GcsObject(NewFile):
    # Held in memory until make_durable() uploads it in one create/write/close: an object on
    # GCS appears whole or not at all, and the bytes stay here for a retry if the upload fails.
    appendable = False

    def __init__(self, path: str) -> None:
        self.path = path
        self._parts: list[bytes] = []
        self._size = 0
        self._uploaded = False

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes) -> None:
        if self._uploaded:
            raise StorageError(
                f"{self.path} is uploaded and GCS objects cannot be appended to; "
                "start a new object"
            )
        self._parts.append(data)
        self._size += len(data)

    def make_durable(self) -> None:
        if self._uploaded:
            return
        data = b"".join(self._parts)
        write_object(self.path, data)
        self._parts = [data]  # joined once; kept only until close()
        self._uploaded = True

    def close(self) -> None:
        self._parts = []


def create_new(path: str, *, name_is_free: bool = False) -> NewFile | None:
    """Start a new file at `path`, or None if something is already there (a stored file may
    already be referenced: never overwrite one).

    Local: exclusive create, so two writers cannot both get the name. GCS: an existence check
    (one request), skipped if the caller says `name_is_free` (it listed its own files once,
    see first_unused_number). Beam's FileSystems has no create-if-absent, so two writers racing
    for one name could both get it: callers keep names unique per writer.
    """
    if is_gcs(path):
        return _GcsObject(path) if name_is_free or not exists(path) else None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        handle = open(path, "xb")  # noqa: SIM115 - the NewFile owns the handle until close()
    except FileExistsError:
        return None
    return _LocalFile(path, handle)


def first_unused_number(directory: str, prefix: str, suffix: str) -> int:
    """One more than the highest N of the files `{prefix}{N}{suffix}` in `directory`, 0 if there
    are none. One listing: a writer restarted under its old name continues after the files of
    its predecessor without asking for each name."""
    highest = -1
    for path in list_files(join(directory, f"{prefix}*{suffix}")):
        number = name(path)[len(prefix) : -len(suffix) or None]
        if number.isdigit():
            highest = max(highest, int(number))
    return highest + 1


def write_file(path: str, data: bytes) -> None:
    """Store `data` as the whole file at `path`, replacing any file there (small files such as
    manifests and summaries). Readers see the old content or the new, never part of it: local
    files are written under a temporary dot-name, fsynced and renamed; GCS objects are uploaded
    in one piece."""
    if is_gcs(path):
        write_object(path, data)
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_object(path: str, data: bytes) -> None:
    """Store `data` as the whole of the GCS object `path` (replacing any object there).

    The object becomes visible only when its upload completes, so readers see all of it or
    nothing; a failed upload leaves no object and raises StorageError.
    """
    filesystems, uncompressed = _gcs()
    try:
        handle = filesystems.create(path, compression_type=uncompressed)
        # Only close() finishes the upload; if write() fails the object is never completed.
        handle.write(data)
        handle.close()
    except Exception as exc:
        raise StorageError(
            f"uploading {len(data)} bytes to {path} failed ({exc}); nothing was stored there, "
            "retry the write"
        ) from exc


# --- Reading and listing ------------------------------------------------------------------


def read_range(path: str, offset: int, length: int) -> bytes:
    """Up to `length` bytes of `path` from `offset` (fewer if the file ends before).

    On GCS this is a ranged read through FileSystems.open + seek + read. Beam's reader fetches
    16 MiB (or the rest of the object) per read whatever `length` is, so one record read from
    a large object transfers more than the record; see docs/storage.md.
    """
    if is_gcs(path):
        filesystems, uncompressed = _gcs()
        try:
            handle = filesystems.open(path, compression_type=uncompressed)
        except Exception as exc:
            raise FileNotFoundError(f"cannot open {path}: {exc}") from exc
        try:
            handle.seek(offset)
            return handle.read(length)
        finally:
            handle.close()
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(length)


def read_all(path: str) -> bytes:
    """The whole content of `path`."""
    if is_gcs(path):
        filesystems, uncompressed = _gcs()
        handle = filesystems.open(path, compression_type=uncompressed)
        try:
            return handle.read()
        finally:
            handle.close()
    with open(path, "rb") as handle:
        return handle.read()


def open_for_reading(path: str) -> BinaryIO:
    """A binary stream over the whole of `path` (local file or GCS object); close it after."""
    if is_gcs(path):
        filesystems, uncompressed = _gcs()
        return filesystems.open(path, compression_type=uncompressed)
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def copy_to_local(path: str, local_path: str) -> None:
    """Copy the file at `path` (local or GCS) to the local file `local_path`."""
    if not is_gcs(path):
        shutil.copyfile(path, local_path)
        return
    filesystems, uncompressed = _gcs()
    source = filesystems.open(path, compression_type=uncompressed)
    try:
        with open(local_path, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
    finally:
        source.close()


def exists(path: str) -> bool:
    """Whether a file (GCS object) is stored at `path`."""
    if is_gcs(path):
        filesystems, _ = _gcs()
        return bool(filesystems.exists(path))
    return os.path.exists(path)


def list_files(pattern: str) -> list[str]:
    """Sorted paths matching a glob (`*` stays within one directory level); [] if none.

    Local names starting with a dot are not matched, like the shell; on GCS every object under
    the pattern's prefix is considered.
    """
    if not is_gcs(pattern):
        return sorted(glob.glob(pattern))
    filesystems, _ = _gcs()
    from apache_beam.io.filesystem import BeamIOError

    try:
        (result,) = filesystems.match([pattern])
    except BeamIOError:
        return []  # Beam reports "no match" for a missing prefix as an error
    return sorted(metadata.path for metadata in result.metadata_list)


def rename(source: str, destination: str) -> None:
    """Move `source` to `destination` (local: atomic replace; GCS: copy, then delete)."""
    if is_gcs(source) or is_gcs(destination):
        filesystems, _ = _gcs()
        filesystems.rename([source], [destination])
        return
    os.replace(source, destination)


def delete(paths: Iterable[str]) -> None:
    """Delete the files at `paths`; a path that does not exist is not an error."""
    remote = []
    for path in paths:
        if is_gcs(path):
            remote.append(path)
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    if remote:
        filesystems, _ = _gcs()
        from apache_beam.io.filesystem import BeamIOError

        try:
            filesystems.delete(remote)
        except BeamIOError as exc:
            missing = [p for p in remote if filesystems.exists(p)]
            if missing:
                raise StorageError(f"could not delete {missing}: {exc}") from exc


# --- Beam and the emulator ----------------------------------------------------------------


def use_storage_emulator() -> str | None:
    """If STORAGE_EMULATOR_HOST is set, make this process's GCS access anonymous at once and
    return the emulator's address; otherwise change nothing and return None.

    Beam asks google.auth for default credentials on its first GCS access in a process and,
    where there are none (as on a machine that only talks to an emulator), retries with
    backoff for ~22 s before going on anonymously. The emulator needs no credentials, so this
    records "no credentials" in Beam's credential cache up front, as Beam's own tests do.
    Idempotent and cheap; storage calls it before its first GCS access, and a runtime that
    uses Beam's GCS support by other means (WriteToText, ReadFromText) should call it first.
    """
    host = os.environ.get(_EMULATOR_VARIABLE)
    if not host:
        return None
    try:
        from apache_beam.internal.gcp.auth import _Credentials
    except ImportError:  # pragma: no cover - Beam without GCP support cannot reach GCS at all
        return host
    lock = getattr(_Credentials, "_credentials_lock", None)
    if lock is None or not hasattr(_Credentials, "_credentials_init"):
        log.warning(
            "Beam's credential cache changed shape; GCS access through the emulator at %s will "
            "first spend ~22 s looking for credentials (update use_storage_emulator)",
            host,
        )
        return host
    with lock:
        _Credentials._credentials = None
        _Credentials._credentials_init = True
    return host


def _gcs() -> tuple[type, str]:
    """Beam's FileSystems and the 'uncompressed' compression type, ready for gs:// paths.

    Every call passes compression explicitly: with Beam's default (AUTO) a `.warc.gz` name
    would make FileSystems gzip our bytes again on write and gunzip them on read.
    """
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    use_storage_emulator()  # before Beam's first credential lookup; cheap to repeat
    return FileSystems, CompressionTypes.UNCOMPRESSED
