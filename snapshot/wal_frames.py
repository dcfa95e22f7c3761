"""SQLite's WAL frame checksums, in Python: a WAL left by a crash is checked whole before SQLite recovers it.

SQLite checks a WAL frame's running checksum (each frame's covers its page
number, its commit size and its page, starting from the one before it) only
when it recovers the WAL after a crash, never when it reads a page from it. The
state's VFS (snapshot/checksum_vfs.c) checks each page read from a live WAL
against its frame in C; `wal_damage` here reads a WAL that a crash left, whose
recovery would keep the frames before the first failing one and silently drop
the rest (right for a torn tail, wrong for a flipped bit with sound frames
after it).

The checksum is SQLite's (wal.c, walChecksumBytes): over 32-bit words, in
pairs, s1 += a + s2; s2 += b + s1. One pair is a linear step,
(s1, s2) <- M (s1, s2) + (a, a + b) with M = [[1, 1], [1, 2]] mod 2^32, so a
whole frame is one product of precomputed powers of M with its words
(`FrameChecksum`), in C through numpy rather than a Python loop per word.

numpy is imported only when a WAL is checked (a node opening a state a crash left), never at import: every
serving process imports this module, and numpy's import starts OpenBLAS's thread pool, whose threads spin
waiting for work they never get here (an integer dot product never calls BLAS). In callgrind that spinning
was a quarter of a reader process's instructions per FindBatches call.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

WAL_HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
_MASK = 0xFFFFFFFF
_FRAME_HEADER = struct.Struct(">IIIIII")  # page number, commit size, salts, checksum
# A frame's first two header words as its checksum reads them: in the WAL's byte order (its magic's last bit).
_BIG_ENDIAN_WORDS = struct.Struct(">II")
_LITTLE_ENDIAN_WORDS = struct.Struct("<II")
_PAGE_SIZES = frozenset(1 << n for n in range(9, 17))  # SQLite's page sizes, 512..65536


@final
class FrameChecksum:
    """SQLite's WAL checksum over a frame's first 8 header bytes and its page, for one page size."""

    def __init__(self, page_size: int) -> None:
        import numpy as np  # here, not at import: see the module's docstring

        self.page_size = page_size
        pairs = (8 + page_size) // 8
        a, b, c, d = 1, 0, 0, 1  # M^0
        powers = np.zeros((pairs + 1, 4), dtype=np.uint64)
        for k in range(pairs + 1):
            powers[k] = (a, b, c, d)
            a, b, c, d = (a + c) & _MASK, (b + d) & _MASK, (a + 2 * c) & _MASK, (b + 2 * d) & _MASK
        self._last = tuple(int(v) for v in powers[pairs])  # M^pairs: how the starting sums carry through
        weights = powers[:pairs][::-1]  # pair i is carried by M^(pairs - 1 - i)
        # s = sum_i M^k (x_i, x_i + y_i): the weight of each word (x_0, y_0, x_1, y_1, ...) in s1 and in s2.
        per_word = np.zeros((2, 2 * pairs), dtype=np.uint64)
        per_word[0, 0::2] = weights[:, 0] + weights[:, 1]
        per_word[0, 1::2] = weights[:, 1]
        per_word[1, 0::2] = weights[:, 2] + weights[:, 3]
        per_word[1, 1::2] = weights[:, 3]
        per_word &= _MASK
        # The header's two words apart (Python ints), the page's as uint32: a uint32 dot product wraps mod 2^32,
        # exactly the arithmetic wanted, with no copy of the page.
        self._header = tuple(int(v) for v in (per_word[0, 0], per_word[0, 1], per_word[1, 0], per_word[1, 1]))
        self._page_s1 = np.ascontiguousarray(per_word[0, 2:], dtype=np.uint32)
        self._page_s2 = np.ascontiguousarray(per_word[1, 2:], dtype=np.uint32)
        self._dot = np.dot

    def compute(self, header: tuple[int, int], page: npt.NDArray[np.uint32], s1: int, s2: int) -> tuple[int, int]:
        """The running checksum after a frame: its header's first two words, then its page's words."""
        a, b, c, d = self._last
        h1x, h1y, h2x, h2y = self._header
        x, y = header
        return (
            (a * s1 + b * s2 + h1x * x + h1y * y + int(self._dot(self._page_s1, page))) & _MASK,
            (c * s1 + d * s2 + h2x * x + h2y * y + int(self._dot(self._page_s2, page))) & _MASK,
        )


_checksums: dict[int, FrameChecksum] = {}
_checksums_lock = threading.Lock()


def frame_checksum(page_size: int) -> FrameChecksum:
    with _checksums_lock:
        checksum = _checksums.get(page_size)
        if checksum is None:
            checksum = _checksums[page_size] = FrameChecksum(page_size)
        return checksum


def reference_checksum(data: bytes, s1: int, s2: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's loop, word by word (the tests hold `FrameChecksum` to it)."""
    import numpy as np

    words = np.frombuffer(data, dtype=">u4" if big_endian else "<u4")
    for i in range(0, len(words), 2):
        s1 = (s1 + int(words[i]) + s2) & _MASK
        s2 = (s2 + int(words[i + 1]) + s1) & _MASK
    return s1, s2


@final
@dataclass(frozen=True, slots=True)
class _WalHeader:
    big_endian: bool  # the checksums' byte order
    page_size: int
    salt1: int
    salt2: int
    checksum: tuple[int, int]  # of the header itself: where the frames' chain starts

    @classmethod
    def parse(cls, data: bytes) -> _WalHeader:
        if len(data) < WAL_HEADER_BYTES:
            return cls(False, 0, 0, 0, (0, 0))
        magic, _version, page_size, _sequence, salt1, salt2, check1, check2 = struct.unpack_from(">8I", data)
        return cls(bool(magic & 1), 65536 if page_size == 1 else page_size, salt1, salt2, (check1, check2))


WAL_MAGIC = 0x377F0682  # its last bit: the checksums' byte order
_HEADER_CHECKSUM_WORDS = 6  # the WAL header's checksum covers its first 24 bytes


def wal_damage(path: Path) -> str | None:
    """What is damaged inside a WAL left by a crash, before SQLite recovers it; None if nothing is.

    SQLite's recovery keeps the frames up to the first one that fails its
    checksum and silently drops the rest: right for a torn tail (frames a
    crash cut short, never synced, never checkpointed), wrong for a bit
    flipped in a frame that later frames follow. Those later frames may
    already be copied into the file by a checkpoint, and the recovered state
    would mix pages of two moments. So a failing frame followed by one that
    verifies (against the stored checksum of the frame before it, with the
    WAL's salts) is damage, and so is a header that does not verify while
    frames follow it: the caller sets the state aside and rebuilds it.
    """
    import numpy as np

    with open(path, "rb") as file:
        header_bytes = file.read(WAL_HEADER_BYTES)
        if len(header_bytes) < WAL_HEADER_BYTES:
            return None  # nothing written, or the header cut short with no frame after it
        header = _WalHeader.parse(header_bytes)
        magic = int.from_bytes(header_bytes[0:4], "big")
        header_sums = reference_checksum(header_bytes[:24], 0, 0, header.big_endian)
        header_sound = magic & ~1 == WAL_MAGIC and header.page_size in _PAGE_SIZES and header_sums == header.checksum
        page_size = header.page_size if header_sound else 0
        frame_bytes = FRAME_HEADER_BYTES + page_size
        if not header_sound:
            rest = file.read(1)
            return f"{path}: its header does not verify, with frames after it" if rest else None
        checksum = frame_checksum(page_size)
        dtype = ">u4" if header.big_endian else "<u4"
        words = _BIG_ENDIAN_WORDS if header.big_endian else _LITTLE_ENDIAN_WORDS
        previous, first_bad, frame = header.checksum, -1, 0
        while len(data := file.read(frame_bytes)) == frame_bytes:
            _page, _commit, salt1, salt2, stored1, stored2 = _FRAME_HEADER.unpack_from(data)
            page = np.frombuffer(data, dtype=dtype, offset=FRAME_HEADER_BYTES).astype(np.uint32)
            verifies = (salt1, salt2) == (header.salt1, header.salt2) and checksum.compute(
                words.unpack_from(data), page, *previous
            ) == (stored1, stored2)
            if not verifies and first_bad < 0:
                first_bad = frame
            elif verifies and first_bad >= 0:
                return f"{path}: frame {first_bad} fails its checksum, and frame {frame} after it verifies"
            previous, frame = (stored1, stored2), frame + 1
    return None
