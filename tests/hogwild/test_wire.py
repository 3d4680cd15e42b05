"""hogwild/multihost/wire.py: fp32, bf16 and fp16 on the wire, differences from a shared reference, the 16-bit sum of
an allreduce; and DOWNPOUR's push keeping what bf16 rounding lost (hogwild/multihost/math.py)."""
import numpy as np
import pytest

from hogwild.multihost.dist_config import DistConfig
from hogwild.multihost.math import DownpourTracker
from hogwild.multihost.wire import Reference, add_into, decode, empty, encode


def test_bf16_rounds_to_nearest_even_and_keeps_specials():
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.inf, -np.inf, np.nan, 3.0e38], dtype=np.float32)
    bits = encode(values, "bf16")
    assert bits.dtype == np.uint16 and bits.nbytes == values.nbytes // 2
    assert list(bits[:6]) == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80, 0xFF80]  # ties to even: 1+2^-8 -> 1.0
    back = decode(bits, "bf16")
    assert back[:6].tolist() == [1.0, 1.0, 1 + 2**-6, -2.5, np.inf, -np.inf]
    assert np.isnan(back[6]) and back[7] == pytest.approx(3.0e38, rel=2**-8)


def test_fp16_and_fp32_round_trips():
    values = np.array([0.1, -3.25, 1e-3], dtype=np.float32)
    assert encode(values, "fp32").tolist() == values.tolist() and encode(values, "fp32") is not values
    assert decode(encode(values, "fp16"), "fp16").tolist() == values.astype(np.float16).astype(np.float32).tolist()
    assert empty(5, "fp16").dtype == np.uint16 and empty(5, "fp32").dtype == np.float32


def test_a_difference_from_the_reference_travels_to_a_fraction_of_itself_not_of_the_parameter():
    """A parameter of 0.5 that moved by 1e-4 since the center both ends hold: sent whole in bf16 its step would be
    lost (0.5 + 1e-4 rounds to 0.5); as a difference it arrives within 2^-9 of the step."""
    center = np.array([0.5, -0.75], dtype=np.float32)
    x = center + np.array([1e-4, -3e-5], dtype=np.float32)
    assert decode(encode(x, "bf16"), "bf16").tolist() == center.tolist()  # the step rounded away
    host, server = Reference(center, "bf16"), Reference(center, "bf16")
    arrived = server.decode(host.encode(x))
    np.testing.assert_allclose(arrived - center, x - center, rtol=2**-8)
    server.move_to(arrived)
    host.move_to(arrived)
    assert host.value.tolist() == server.value.tolist() == arrived.tolist()
    exact = Reference(center, "fp32")
    assert exact.decode(exact.encode(x)).tolist() == x.tolist() and exact.value is None


def test_the_16_bit_sum_adds_in_fp32_and_the_mean_comes_back_from_the_reference():
    reference = Reference(np.array([1.0, 2.0], dtype=np.float32), "bf16")
    hosts = [np.array([1.5, 2.25], dtype=np.float32), np.array([0.5, 1.75], dtype=np.float32)]
    total = reference.encode(hosts[0])
    add_into(reference.encode(hosts[1]), total, "bf16")
    assert reference.decode_mean(total, 2).tolist() == [1.0, 2.0]


def test_a_rounded_push_leaves_what_it_lost_for_the_next_one():
    tracker = DownpourTracker(np.zeros(1, dtype=np.float32))
    current = np.array([1 + 2**-9], dtype=np.float32)  # bf16 cannot carry the 2^-9
    bf16 = lambda delta: decode(encode(delta, "bf16"), "bf16")  # noqa: E731
    first = tracker.push(current, bf16)
    second = tracker.push(current, bf16)
    assert first.tolist() == [1.0] and second.tolist() == [2**-9]  # the servers get the whole update in the end
    assert (tracker.reference == current).all()


def test_an_unknown_wire_format_is_refused():
    with pytest.raises(ValueError, match="DistConfig.wire must be one of .*'fp8'"):
        DistConfig(wire="fp8")
