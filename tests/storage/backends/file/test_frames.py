"""The journal's framing: what was written is read back exactly; a torn or zero-filled tail is
dropped, never half-read; corruption before valid frames is refused; files are written durably,
0600, and replaced atomically."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainspring.storage._backends.file import frames as _frames
from mainspring.storage._backends.file.frames import (
    HEADER_SIZE,
    Scan,
    append_frames,
    encode_frame,
    read_journal,
    replace_file,
    scan_frames,
)
from mainspring.storage._errors import RecordError, StorageError, TooLarge
from tests._examples import examples

MAX_FRAME = 1 << 20
KIND = "journal ex-1"


def _journal(payloads: list[bytes]) -> bytes:
    return b"".join(encode_frame(p) for p in payloads)


def _payloads(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [
        orjson.dumps({"seq": i, "kind": "step-finished", "output": "x" * rng.randrange(0, 120)})
        for i in range(n)
    ]


def _scan(data: bytes) -> Scan:
    return scan_frames(data, kind=KIND, max_frame=MAX_FRAME)


def _ends(payloads: list[bytes]) -> list[int]:
    """The byte offset where each frame ends."""
    ends, at = [], 0
    for payload in payloads:
        at += HEADER_SIZE + len(payload)
        ends.append(at)
    return ends


# -- round trips ---------------------------------------------------------------------------


def test_many_payloads_round_trip_including_the_empty_one() -> None:
    payloads = [b"", *_payloads(300), b"", bytes(range(256)), b"MSJ1" * 10, b""]
    data = _journal(payloads)
    assert _scan(data) == Scan(payloads=tuple(payloads), valid_length=len(data), torn=False)
    assert _scan(b"") == Scan(payloads=(), valid_length=0, torn=False)


def test_a_frame_is_its_header_then_its_payload() -> None:
    frame = encode_frame(b"{}")
    assert frame[:4] == b"MSJ1"
    assert int.from_bytes(frame[4:8], "little") == 2
    assert len(frame) == HEADER_SIZE + 2
    assert frame[HEADER_SIZE:] == b"{}"


@given(st.lists(st.binary(max_size=300), max_size=30))
@settings(max_examples=examples(200), deadline=None)
def test_any_payloads_round_trip(payloads: list[bytes]) -> None:
    data = _journal(payloads)
    assert _scan(data) == Scan(payloads=tuple(payloads), valid_length=len(data), torn=False)


def test_a_payload_over_the_u32_length_field_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_frames, "_U32_MAX", 3)  # rather than allocate 4 GiB
    assert encode_frame(b"abc")
    with pytest.raises(ValueError, match="at most 3 bytes"):
        encode_frame(b"abcd")


def test_X2_an_intact_frame_over_max_frame_is_refused_as_too_large_not_hidden() -> None:
    # Taken for a torn tail, an oversize record would read as absent (or lose its last
    # entries silently); its header is intact, so it is what it says: too large to read.
    data = _journal([b"a" * 10, b"b" * 100])
    with pytest.raises(TooLarge):
        scan_frames(data, kind=KIND, max_frame=99)


# -- torn tails and corruption -----------------------------------------------------------


def test_a_journal_cut_at_every_byte_of_its_last_three_frames_keeps_the_whole_frames() -> None:
    payloads = _payloads(12)
    data = _journal(payloads)
    ends = _ends(payloads)
    for cut in range(ends[-4], len(data) + 1):
        scan = _scan(data[:cut])  # never raises
        whole = sum(1 for end in ends if end <= cut)
        assert scan.payloads == tuple(payloads[:whole])  # never a partial payload
        assert scan.valid_length == (ends[whole - 1] if whole else 0)
        assert scan.torn is (cut != scan.valid_length)


def test_1000_single_bit_flips_never_yield_a_wrong_payload() -> None:
    rng = random.Random(20261201)
    payloads = _payloads(20)
    data = _journal(payloads)
    last_start = _ends(payloads)[-2]
    outcomes = {"torn": 0, "refused": 0}
    for _ in range(1000):
        bit = rng.randrange(len(data) * 8)
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        if bit // 8 < last_start:  # in an earlier frame: acknowledged entries follow it
            with pytest.raises(RecordError, match="valid frames follow") as caught:
                _scan(bytes(flipped))
            assert caught.value.kind == KIND
            outcomes["refused"] += 1
            continue
        scan = _scan(bytes(flipped))
        for index, payload in enumerate(scan.payloads):
            assert payload == payloads[index]  # 0 wrongly accepted
        assert scan == Scan(payloads=tuple(payloads[:19]), valid_length=last_start, torn=True)
        outcomes["torn"] += 1
    assert outcomes["torn"] > 0
    assert outcomes["refused"] > 0


def test_a_corrupt_frame_followed_by_valid_ones_names_its_offset() -> None:
    payloads = _payloads(5)
    data = bytearray(_journal(payloads))
    at = _ends(payloads)[1]
    data[at + HEADER_SIZE] ^= 0xFF  # the third frame's payload
    with pytest.raises(RecordError, match=f"corrupt frame at byte {at}, valid frames follow"):
        _scan(bytes(data))


def test_a_zero_filled_tail_is_ignored() -> None:
    payloads = _payloads(5)
    data = _journal(payloads)
    assert _scan(data + bytes(4096)) == Scan(
        payloads=tuple(payloads), valid_length=len(data), torn=True
    )
    # the zeros a crash leaves where the last frame's payload should be
    last = encode_frame(b'{"seq":5}')
    cut = data + last[:HEADER_SIZE] + bytes(len(last) - HEADER_SIZE) + bytes(4096)
    assert _scan(cut) == Scan(payloads=tuple(payloads), valid_length=len(data), torn=True)


def test_a_tail_of_frame_like_garbage_is_a_tail() -> None:
    payloads = _payloads(3)
    data = _journal(payloads)
    frame = encode_frame(b'{"seq":3}')
    garbage = b"MSJ1" + bytes(40) + frame[:HEADER_SIZE] + b"MSJ1" + frame[:-1]
    assert _scan(data + garbage) == Scan(
        payloads=tuple(payloads), valid_length=len(data), torn=True
    )


def test_a_frame_inside_an_intact_frames_payload_is_payload_not_a_later_frame() -> None:
    inner = encode_frame(b"looks like a frame")
    outer = encode_frame(b"prefix" + inner)
    torn = outer[: len(outer) - 1]  # the outer frame is cut short; the inner one is complete
    assert _scan(torn) == Scan(payloads=(), valid_length=0, torn=True)


# -- reading files -------------------------------------------------------------------------


def _read(path: Path, max_bytes: int = 1 << 20) -> Scan | None:
    return read_journal(path, kind=KIND, max_bytes=max_bytes, max_frame=MAX_FRAME)


def test_read_journal_reads_a_file_and_none_when_there_is_none(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    assert _read(path) is None
    payloads = _payloads(3)
    path.write_bytes(_journal(payloads))
    assert _read(path) == _scan(_journal(payloads))


class _ReadSpy:
    """A file handle that records how many bytes each ``read`` asked for."""

    def __init__(self, handle: Any, reads: list[int]) -> None:
        self.handle = handle
        self.reads = reads

    def __enter__(self) -> _ReadSpy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def fileno(self) -> int:
        return int(self.handle.fileno())

    def read(self, n: int) -> bytes:
        self.reads.append(n)
        return bytes(self.handle.read(n))


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real_fdopen = os.fdopen
    reads: list[int] = []
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: _ReadSpy(real_fdopen(*a, **k), reads))
    return reads


def test_a_file_over_max_bytes_is_refused_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ex-1.journal"
    path.write_bytes(_journal(_payloads(10)))
    size = path.stat().st_size
    reads = _spy_reads(monkeypatch)
    with pytest.raises(TooLarge) as caught:
        _read(path, max_bytes=size - 1)
    assert (caught.value.size, caught.value.limit, caught.value.what) == (size, size - 1, KIND)
    assert reads == []  # X2: refused before reading
    assert _read(path, max_bytes=size) is not None
    assert reads == [size + 1]  # at most max_bytes + 1


def test_X2_a_read_asks_for_no_more_memory_than_the_file_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read reserves what it asks for: asking for the bound (1 GiB) on every read of a small
    # journal reserved a gigabyte each time. It asks for the size fstat saw, and one byte more.
    path = tmp_path / "ex-1.journal"
    path.write_bytes(_journal(_payloads(10)))
    size = path.stat().st_size
    reads = _spy_reads(monkeypatch)
    assert _read(path, max_bytes=1 << 30) == _scan(_journal(_payloads(10)))
    assert reads == [size + 1]


def test_a_file_that_grows_after_fstat_is_still_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ex-1.journal"
    path.write_bytes(_journal(_payloads(10)))
    journal = path.stat()
    real_fstat = os.fstat

    def fstat_before_it_grew(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        if (info.st_dev, info.st_ino) != (journal.st_dev, journal.st_ino):
            # Another file (a thread or finalizer of an earlier test, still at work on a
            # loaded machine): told the truth, so that only this journal seems to grow.
            return info
        fields = list(info)
        fields[stat.ST_SIZE] = 10
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fstat_before_it_grew)
    with pytest.raises(TooLarge) as caught:
        _read(path, max_bytes=100)
    assert caught.value.size == 101  # read max_bytes + 1 and stopped


def test_other_open_errors_are_raised_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(*args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(PermissionError):
        _read(tmp_path / "ex-1.journal")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_at_the_path_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    os.mkfifo(path)
    with pytest.raises(RecordError, match="not a regular file"):
        _read(path)
    with pytest.raises(OSError):  # noqa: PT011 - ENXIO: no reader; nothing is written
        append_frames(path, encode_frame(b"{}"), valid_length=0)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(StorageError, match="not a regular file"):  # opened, then refused
            append_frames(path, encode_frame(b"{}"), valid_length=0)
        assert os.read(reader, 100) == b""  # nothing reached the reader (and no writer is left)
    finally:
        os.close(reader)


def test_a_symlink_at_the_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(_journal(_payloads(2)))
    path = tmp_path / "ex-1.journal"
    path.symlink_to(target)
    with pytest.raises(RecordError, match="symlink"):
        _read(path)
    with pytest.raises(OSError):  # noqa: PT011 - ELOOP
        append_frames(path, encode_frame(b"{}"), valid_length=0)
    assert target.read_bytes() == _journal(_payloads(2))  # untouched through the link
    dangling = tmp_path / "ex-2.journal"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(RecordError, match="symlink"):
        _read(dangling)


def test_a_symlink_is_refused_where_open_cannot_refuse_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_frames, "O_NOFOLLOW", 0)  # as on a platform without it
    target = tmp_path / "elsewhere"
    target.write_bytes(_journal(_payloads(2)))
    path = tmp_path / "ex-1.journal"
    path.symlink_to(target)
    with pytest.raises(RecordError, match="symlink"):
        _read(path)


def test_a_directory_at_the_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    path.mkdir()
    with pytest.raises(RecordError, match="not a regular file"):
        _read(path)


# -- writing -------------------------------------------------------------------------------


def test_appends_accumulate_and_return_the_new_length(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    payloads = _payloads(6)
    length = 0
    for i in range(0, 6, 2):
        length = append_frames(path, _journal(payloads[i : i + 2]), valid_length=length)
        assert length == path.stat().st_size
    assert _read(path) == Scan(payloads=tuple(payloads), valid_length=length, torn=False)


def test_append_drops_a_torn_tail_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    payloads = _payloads(4)
    whole = _journal(payloads[:3])
    path.write_bytes(whole + encode_frame(payloads[3])[:-3] + bytes(100))
    scan = _read(path)
    assert scan is not None
    assert scan.torn
    assert scan.valid_length == len(whole)
    length = append_frames(path, encode_frame(payloads[3]), valid_length=scan.valid_length)
    assert _read(path) == Scan(payloads=tuple(payloads), valid_length=length, torn=False)


def test_append_refuses_a_file_shorter_than_what_was_read(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    path.write_bytes(encode_frame(b"{}"))
    with pytest.raises(StorageError, match="shorter than"):
        append_frames(path, encode_frame(b"{}"), valid_length=100)
    assert path.read_bytes() == encode_frame(b"{}")  # no hole of zeros written


def test_a_failed_fsync_is_raised_and_the_next_append_overwrites_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ex-1.journal"
    length = append_frames(path, encode_frame(b"1"), valid_length=0)

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output"):
        append_frames(path, encode_frame(b"lost"), valid_length=length)
    monkeypatch.undo()
    length = append_frames(path, encode_frame(b"2"), valid_length=length)
    assert _read(path) == Scan(payloads=(b"1", b"2"), valid_length=length, torn=False)


def test_files_are_created_0600_even_under_umask_000(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        journal = tmp_path / "ex-1.journal"
        append_frames(journal, encode_frame(b"{}"), valid_length=0)
        snapshot = tmp_path / "ex-1.snapshot"
        replace_file(snapshot, b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600


def test_replace_file_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "ex-1.journal"
    path.write_bytes(b"old")
    replace_file(path, _journal(_payloads(3)))
    assert path.read_bytes() == _journal(_payloads(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex-1.journal"]


def test_a_failed_replace_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ex-1.journal"
    path.write_bytes(b"old")

    def failing(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="No space"):
        replace_file(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex-1.journal"]
