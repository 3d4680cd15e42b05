"""Wire formats of multi-host exchanges: parameters travel as fp32, or as bf16 or fp16 (half the bytes), and are
kept and accumulated in fp32 where they land (as Horovod's Compression.fp16).

What travels in 16 bits is never a parameter itself but its difference from a Reference that both ends of a channel
hold identically (the center a host last received, the average a ring pair last agreed on): bf16 keeps 8 bits of
mantissa, so a parameter of 0.5 would arrive off by up to 1e-3, more than an elastic step moves it, while its
difference from the last center arrives to within 0.4% of that difference. fp32 sends the values themselves, exactly.

Usage: `ref = Reference(start, "bf16"); wire = ref.encode(x)` -> uint16 (N,); the other end: `x_hat = ref.decode(wire)`
(both then `ref.move_to(agreed)` with a value both computed from decoded data).
"""
from __future__ import annotations

import numpy as np

from .dist_config import WIRE_FORMATS


def encode(values: np.ndarray, wire: str) -> np.ndarray:
    """float32 values in the wire format: float32 itself, or the 16 bits of bf16 (round to nearest even) or fp16 as
    uint16.  # (N,) -> (N,)"""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if wire == "fp32":
        return values.copy()
    if wire == "fp16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    halves = (rounded >> np.uint32(16)).astype(np.uint16)
    halves[np.isnan(values)] = 0x7FC0  # a NaN stays a NaN (its rounding could carry into the exponent)
    return halves


def decode(data: np.ndarray, wire: str) -> np.ndarray:
    """The float32 values of wire data.  # (N,) -> (N,)"""
    if wire == "fp32":
        return np.asarray(data, dtype=np.float32)
    if wire == "fp16":
        return data.view(np.float16).astype(np.float32)
    return (data.astype(np.uint32) << np.uint32(16)).view(np.float32)


def empty(size: int, wire: str) -> np.ndarray:
    """A receive buffer for `size` values in the wire format.  # (size,)"""
    return np.empty(size, dtype=np.float32 if wire == "fp32" else np.uint16)


def add_into(incoming: np.ndarray, total: np.ndarray, wire: str) -> None:
    """total += incoming for 16-bit wire data (an allreduce's reduction): added in fp32, rounded once per step."""
    total[:] = encode(decode(incoming, wire) + decode(total, wire), wire)


class Reference:
    """A value both ends of a channel hold identically; in 16 bits, what travels is the difference from it."""

    def __init__(self, start: np.ndarray, wire: str) -> None:
        if wire not in WIRE_FORMATS:
            raise ValueError(f"wire format must be one of {WIRE_FORMATS}, got {wire!r}")
        self.wire = wire
        self.value = None if wire == "fp32" else np.array(start, dtype=np.float32)  # (N,)

    def encode(self, values: np.ndarray) -> np.ndarray:
        return encode(values if self.value is None else values - self.value, self.wire)

    def decode(self, data: np.ndarray) -> np.ndarray:
        return decode(data, self.wire) if self.value is None else self.value + decode(data, self.wire)

    def decode_mean(self, data: np.ndarray, count: int) -> np.ndarray:
        """The mean of `count` values whose encodings were summed into `data` (an allreduce's result)."""
        mean = decode(data, self.wire) / np.float32(count)
        return mean if self.value is None else self.value + mean

    def move_to(self, agreed: np.ndarray) -> None:
        """Both ends move the reference to the same value, computed from the decoded data of the exchange."""
        if self.value is not None:
            self.value = np.array(agreed, dtype=np.float32)
