"""The on-disk framing of FileStore's per-execution journal: frames in, frames out, durably.

A journal file is a sequence of frames. A frame is a 16-byte header, then the payload::

    b"MSJ1" | payload length (u32 LE) | crc32(payload) (u32 LE) | crc32(header[0:12]) (u32 LE)

The payload is opaque here (the caller's JSON). Reading stops at the first frame that is
incomplete or fails a check. What follows is a torn tail (a write cut short by a crash, or the
zeros a filesystem may leave after one) only if no valid frame can be found after it; a valid
frame after a bad one means acknowledged entries would be lost, so that is refused loudly,
never skipped. A payload is returned only once its own checksum matched: nothing is half-read.

Everything here is synchronous and blocking: callers run it in a worker thread (STYLE.md,
habit 10).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import tempfile
import zlib
from pathlib import Path
from typing import BinaryIO

import attrs

from ..._errors import RecordError, StorageError, TooLarge
from ..._platform import O_BINARY, O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK

__all__ = [
    "Scan",
    "append_frames",
    "check_regular_and_bounded",
    "encode_frame",
    "read_journal",
    "replace_file",
    "scan_frames",
]

MAGIC = b"MSJ1"
_HEADER = struct.Struct("<4sIII")  # magic, payload length, payload crc, header crc
HEADER_SIZE = _HEADER.size  # 16
_PREFIX = struct.Struct("<4sII")  # the 12 bytes the header crc covers
_U32_MAX = 0xFFFF_FFFF
_TEMP_PREFIX = ".tmp-"


@attrs.frozen(kw_only=True)
class Scan:
    """What :func:`scan_frames` read: the payloads of the valid prefix, in order.

    ``valid_length`` is the byte offset where that prefix ends (where the next append goes);
    ``torn`` is True if bytes after it were ignored as a torn or zero-filled tail.
    """

    payloads: tuple[bytes, ...]
    valid_length: int
    torn: bool


def encode_frame(payload: bytes) -> bytes:
    """One frame holding ``payload``. The caller bounds its size (``max_frame`` on reading)."""
    if len(payload) > _U32_MAX:
        raise ValueError(f"a frame holds at most {_U32_MAX:,} bytes, not {len(payload):,}")
    prefix = _PREFIX.pack(MAGIC, len(payload), zlib.crc32(payload))
    return prefix + zlib.crc32(prefix).to_bytes(4, "little") + payload


def _header_length(data: bytes, offset: int, max_frame: int) -> int | None:
    """The payload length of an intact header at ``offset`` (magic, header crc, bound), or None."""
    if len(data) - offset < HEADER_SIZE:
        return None
    magic, length, _, header_crc = _HEADER.unpack_from(data, offset)
    if magic != MAGIC or length > max_frame:
        return None
    if zlib.crc32(memoryview(data)[offset : offset + 12]) != header_crc:
        return None
    return int(length)


def _payload_ok(data: bytes, offset: int, length: int) -> bool:
    """True if the payload after the intact header at ``offset`` is complete and matches."""
    start = offset + HEADER_SIZE
    if start + length > len(data):
        return False
    expected = int.from_bytes(data[offset + 8 : offset + 12], "little")
    return zlib.crc32(memoryview(data)[start : start + length]) == expected


def _next_frame(data: bytes, start: int, max_frame: int) -> int | None:
    """The first offset >= ``start`` where a complete frame passes every check, or None."""
    offset = data.find(MAGIC, start)
    while offset != -1:
        length = _header_length(data, offset, max_frame)
        if length is not None and _payload_ok(data, offset, length):
            return offset
        offset = data.find(MAGIC, offset + 1)
    return None


def _refuse_oversize(data: bytes, offset: int, max_frame: int, kind: str) -> None:
    """An intact header naming a frame over the bound: a record too large to read (X2),
    refused as such rather than taken for a torn tail (which would hide it)."""
    if len(data) - offset < HEADER_SIZE:
        return
    magic, length, _, header_crc = _HEADER.unpack_from(data, offset)
    intact = magic == MAGIC and zlib.crc32(memoryview(data)[offset : offset + 12]) == header_crc
    if intact and length > max_frame:
        raise TooLarge(f"{kind} (a journal frame)", length, max_frame)


def scan_frames(data: bytes, *, kind: str, max_frame: int) -> Scan:
    """The valid frames at the start of ``data``; a torn tail is dropped, never half-read.

    Raises :class:`RecordError` (naming ``kind``) if a bad frame is followed by a valid one:
    that is corruption in the middle of the journal, and reading past it, or stopping at it,
    would silently lose acknowledged entries.
    """
    payloads: list[bytes] = []
    offset = 0
    end = len(data)
    while offset < end:
        length = _header_length(data, offset, max_frame)
        if length is None:
            _refuse_oversize(data, offset, max_frame, kind)
        if length is not None and _payload_ok(data, offset, length):
            start = offset + HEADER_SIZE
            payloads.append(data[start : start + length])
            offset = start + length
            continue
        # A bad frame at `offset`. When its header is intact its length is the writer's (the
        # header crc catches every single-bit error), so the bytes up to that length are its
        # payload: anything frame-like in them is payload content, not a later frame.
        resume = offset + 1 if length is None else offset + HEADER_SIZE + length
        if _next_frame(data, resume, max_frame) is not None:
            problem = f"journal: corrupt frame at byte {offset}, valid frames follow"
            raise RecordError(kind, [problem])
        return Scan(payloads=tuple(payloads), valid_length=offset, torn=True)
    return Scan(payloads=tuple(payloads), valid_length=offset, torn=False)


def check_regular_and_bounded(fd: int, *, kind: str, max_bytes: int) -> int:
    """The size of the regular file open as ``fd``; refuses anything else, or a file over
    ``max_bytes`` (X2), before a byte is read."""
    info = os.fstat(fd)  # before fdopen, which raises IsADirectoryError for a directory
    if not stat.S_ISREG(info.st_mode):
        raise RecordError(kind, ["(file): not a regular file"])
    if info.st_size > max_bytes:  # X2: bounded before reading
        raise TooLarge(kind, info.st_size, max_bytes)
    return info.st_size


#: What one read of a file that grew after ``fstat`` asks for at a time.
_GROWTH_CHUNK = 1 << 20


def read_bounded(handle: BinaryIO, size: int, max_bytes: int) -> bytes:
    """The file's bytes, at most ``max_bytes + 1`` of them (X2). One read of the ``size``
    ``fstat`` gave (and one byte more, to see growth): a read asks for as much memory as it
    may return, so asking for ``max_bytes`` would reserve the whole bound on every read. A
    file that grew since is read on in bounded chunks, up to one byte past the bound."""
    data = handle.read(size + 1)
    if len(data) <= size:
        return data
    chunks = [data]
    total = len(data)
    while total <= max_bytes:
        chunk = handle.read(min(_GROWTH_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_journal(path: Path, *, kind: str, max_bytes: int, max_frame: int) -> Scan | None:
    """The scanned journal at ``path``, or None if there is no file.

    Refuses (:class:`RecordError`) a symlink, FIFO, directory or anything else that is not a
    regular file, without blocking on it; refuses (:class:`TooLarge`) a file over
    ``max_bytes`` before reading it, and reads at most ``max_bytes + 1`` bytes (X2), asking
    for no more memory than the file holds.
    """
    if not O_NOFOLLOW and path.is_symlink():  # the platform cannot refuse it at open()
        raise RecordError(kind, ["(file): a symlink, not a regular file"])
    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the reader.
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_BINARY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a symlink (EMLINK: BSD)
            raise RecordError(kind, ["(file): a symlink, not a regular file"]) from None
        raise
    try:
        size = check_regular_and_bounded(fd, kind=kind, max_bytes=max_bytes)
        handle = os.fdopen(fd, "rb")
    except BaseException:  # any way out: the fd closed, re-raised
        os.close(fd)
        raise
    with handle:
        data = read_bounded(handle, size, max_bytes)
    if len(data) > max_bytes:  # X2: it grew between fstat and read
        raise TooLarge(kind, len(data), max_bytes)
    return scan_frames(data, kind=kind, max_frame=max_frame)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _chmod_600(fd: int, path: Path) -> None:
    # The umask may have narrowed the mode; 0600 whatever it was (files 0600, DESIGN.md).
    fchmod = getattr(os, "fchmod", None)
    if fchmod is not None:
        fchmod(fd, 0o600)
    else:  # pragma: no cover - Windows before 3.13
        os.chmod(path, 0o600)


def _fsync_directory(directory: Path) -> None:
    """Make a creation or rename in ``directory`` durable (a no-op where it cannot be opened)."""
    o_directory = getattr(os, "O_DIRECTORY", 0)
    if not o_directory:  # pragma: no cover - Windows cannot open a directory
        return
    dir_fd = os.open(directory, os.O_RDONLY | o_directory | O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def append_frames(path: Path, frames: bytes, *, valid_length: int) -> int:
    """Write ``frames`` (encoded frames) at ``valid_length`` and fsync; the new file length.

    ``valid_length`` is :attr:`Scan.valid_length` from the last read: a torn tail after it is
    dropped first (ftruncate), so the file scans cleanly afterwards, and a write that failed
    half-way is overwritten by the next append. A file created here is 0600 and its directory
    is fsynced too. On any ``OSError`` nothing was made durable as far as the caller may know:
    it is raised, and the caller must not acknowledge. A file that is not regular, or shorter
    than ``valid_length`` (it changed behind the caller's back), is refused (StorageError)
    before anything is written.
    """
    # O_NONBLOCK: opening a planted FIFO fails (ENXIO) or returns at once, never hangs.
    flags = os.O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_BINARY
    created = True
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        created = False
        fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"{path} is not a regular file: not appending to it")
        if info.st_size < valid_length:
            raise StorageError(
                f"{path} is {info.st_size:,} bytes, shorter than the {valid_length:,} "
                "already read: not appending to it"
            )
        if created:
            _chmod_600(fd, path)
        if info.st_size > valid_length:
            os.ftruncate(fd, valid_length)  # the torn tail goes before anything is appended
        try:
            os.lseek(fd, valid_length, os.SEEK_SET)
            _write_all(fd, frames)
            os.fsync(fd)
        except OSError:
            # Not acknowledged, so not left for readers to find either (best effort: the
            # next append cuts it off in any case).
            with contextlib.suppress(OSError):
                os.ftruncate(fd, valid_length)
            raise
    finally:
        os.close(fd)
    if created:
        _fsync_directory(path.parent)  # the new name is durable only once its directory is
    return valid_length + len(frames)


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (a journal compacted, a snapshot).

    A temp file (``.tmp-*``, 0600) in the same directory is written, fsynced, renamed over
    ``path``, and the directory fsynced. A reader sees the old file or the new one, never a
    mix. If anything fails before the rename the temp file is removed and ``path`` is
    untouched; if the directory fsync fails the new file is in place but may not be durable,
    and the error is raised all the same.
    """
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX)
    try:
        try:
            _chmod_600(fd, Path(temp))
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:  # any way out: no temp file left, re-raised
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_directory(path.parent)  # the rename itself is durable only once the directory is
