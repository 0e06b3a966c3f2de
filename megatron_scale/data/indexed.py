"""Whether a Megatron indexed dataset (`PREFIX.bin` / `PREFIX.idx`) is whole, checked from the
file sizes and the .idx header alone (constant time, no token read), before any rank starts.

megatron-core's .idx (megatron/core/datasets/indexed_dataset.py, _IndexWriter) is
    b"MMIDIDX\\x00\\x00"  u64 version (1)  u8 dtype code  u64 S sequences  u64 D document indices
    S x int32 sequence lengths (tokens)  S x int64 sequence pointers (byte offsets into the .bin)
    D x int64 document indices  [S x int8 modes: multimodal datasets only]
and the .bin is the sequences' tokens back to back, so it must hold exactly
pointer[-1] + length[-1] x dtype size bytes. megatron-core itself only asserts on the header
and reads the rest through a memory map: a short .idx or .bin surfaces much later, on some
rank, as a numpy buffer error or garbage tokens. Here each case is one DatasetError naming the
file.
"""

from __future__ import annotations

import os
import struct

import numpy as np

HEADER = b"MMIDIDX\x00\x00"
HEADER_BYTES = len(HEADER) + 8 + 1 + 8 + 8  # magic, version, dtype code, sequence and document counts
# megatron-core's DType codes (indexed_dataset.DType) -> numpy dtype
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}


class DatasetError(ValueError):
    """An indexed dataset cannot be read as it is; the message names the file."""


def check_indexed_dataset(prefix: str) -> None:
    """Raise DatasetError naming the file when PREFIX.idx / PREFIX.bin are missing, truncated, or
    do not belong together (the .bin's size is not what the .idx's last pointer and length say)."""
    bin_path, idx_path = prefix + ".bin", prefix + ".idx"
    missing = [p for p in (bin_path, idx_path) if not os.path.isfile(p)]
    if missing:
        raise DatasetError(f"dataset {prefix} has no {' / '.join(missing)}")
    idx_size, bin_size = os.path.getsize(idx_path), os.path.getsize(bin_path)
    if idx_size < HEADER_BYTES:
        raise DatasetError(f"{idx_path} is truncated: {idx_size} bytes, shorter than the {HEADER_BYTES}-byte header")
    with open(idx_path, "rb") as f:
        magic, version, code, sequences, documents = struct.unpack("<9sQBQQ", f.read(HEADER_BYTES))
        if magic != HEADER or version != 1:
            raise DatasetError(f"{idx_path} is not a megatron-core index (header {magic!r}, version {version})")
        if code not in DTYPES:
            raise DatasetError(f"{idx_path}: unknown token dtype code {code}")
        arrays = sequences * (4 + 8) + documents * 8
        if idx_size not in (HEADER_BYTES + arrays, HEADER_BYTES + arrays + sequences):  # + modes (multimodal)
            raise DatasetError(
                f"{idx_path} is truncated or damaged: {idx_size} bytes, but its header ({sequences} sequences, "
                f"{documents} document indices) needs {HEADER_BYTES + arrays}")
        last_length = last_pointer = 0
        if sequences:
            f.seek(HEADER_BYTES + (sequences - 1) * 4)
            (last_length,) = struct.unpack("<i", f.read(4))
            f.seek(HEADER_BYTES + sequences * 4 + (sequences - 1) * 8)
            (last_pointer,) = struct.unpack("<q", f.read(8))
        last_document = 0
        if documents:
            f.seek(HEADER_BYTES + sequences * 12 + (documents - 1) * 8)
            (last_document,) = struct.unpack("<q", f.read(8))
    if documents and last_document != sequences:
        raise DatasetError(f"{idx_path} is damaged: its last document ends at sequence {last_document}, "
                           f"not at its {sequences} sequences")
    itemsize = np.dtype(DTYPES[code]).itemsize
    expected = last_pointer + last_length * itemsize
    if bin_size != expected:
        kind = np.dtype(DTYPES[code]).name
        why = ("is truncated, or the .idx is not its index" if bin_size < expected
               else "does not match its .idx (the .idx indexes another dataset)")
        raise DatasetError(
            f"{bin_path} {why}: {bin_size} bytes, but {idx_path} ({sequences} sequences of {kind} tokens) "
            f"says {expected}")
