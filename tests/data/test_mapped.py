"""data/mapped.py's scan_array: one read of an array's file (in blocks, without mapping it) gives its CRC-32, range
and order, exactly as numpy computes them over the whole array, across block boundaries too."""
import zlib

import numpy as np

from hogwild.data import mapped
from hogwild.data.mapped import open_array, scan_array


def test_a_scan_equals_the_whole_array_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped, "SCAN_BYTES", 64)  # 32 uint16 a block: the checks cross block boundaries
    values = np.random.default_rng(0).integers(0, 900, size=1001).astype(np.uint16)
    offsets = np.concatenate([[0], np.cumsum(np.arange(1, 300))]).astype(np.int64)
    for array in (values, offsets, values.reshape(7, 143)):
        np.save(tmp_path / "a.npy", array)
        scan = scan_array(open_array(tmp_path / "a.npy"))
        flat = array.reshape(-1)
        assert scan.crc32 == zlib.crc32((tmp_path / "a.npy").read_bytes())
        assert (scan.low, scan.high, scan.first, scan.last) == (flat.min(), flat.max(), flat[0], flat[-1])
        assert scan.ordered == bool(np.all(flat[1:] >= flat[:-1]))
    offsets[32] = offsets[31] - 1  # a decrease right at a block boundary (8 int64 a block)
    np.save(tmp_path / "a.npy", offsets)
    assert not scan_array(open_array(tmp_path / "a.npy")).ordered
    np.save(tmp_path / "a.npy", np.zeros(0, np.int64))
    scan = scan_array(open_array(tmp_path / "a.npy"))
    assert (scan.low, scan.high, scan.ordered, scan.first) == (None, None, True, None)
