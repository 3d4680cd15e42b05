"""The multi-host wire protocol: message tags, message kinds and the message layout, shared by the training hosts'
agents and the servers/tester (so neither imports the other).

A request is a one-element header [kind] on TAG_SERVER (to a server) or TAG_MIX (to an AD-PSGD neighbour); a kind
that carries values (PUSH, ELASTIC, MIX) is followed by them on TAG_PAYLOAD, their size known to both sides (the
server's partition, the whole model). Big values travel in pieces (.pieces), so their size must be known.

Usage: `transport.isend(message(PUSH), server, TAG_SERVER); transport.isend(delta[lo:hi], server, TAG_PAYLOAD)`.
"""
from __future__ import annotations

import numpy as np

# message tags and kinds (the kind is the one element of a header)
TAG_SERVER, TAG_REPLY, TAG_MIX, TAG_MIX_REPLY, TAG_TESTER, TAG_TESTER_REPLY, TAG_STOP, TAG_PAYLOAD = range(10, 18)
PUSH, FETCH, ELASTIC, BYE, MIX = 1.0, 2.0, 3.0, 4.0, 5.0
POLL_SECONDS = 0.002


def message(kind: float) -> np.ndarray:
    """A request's header.  # (1,)"""
    return np.array([kind], dtype=np.float32)
