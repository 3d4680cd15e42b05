"""The multi-host wire protocol: message tags, message kinds and the message layout, shared by the training hosts'
agents and the servers/tester (so neither imports the other).

Usage: `transport.isend(message(PUSH, delta), server, TAG_SERVER)`.
"""
from __future__ import annotations

import numpy as np

# message tags and kinds (the kind travels in element 0 of a float32 message)
TAG_SERVER, TAG_REPLY, TAG_MIX, TAG_MIX_REPLY, TAG_TESTER, TAG_TESTER_REPLY, TAG_STOP = range(10, 17)
PUSH, FETCH, ELASTIC, BYE, MIX = 1.0, 2.0, 3.0, 4.0, 5.0
POLL_SECONDS = 0.002


def message(kind: float, payload: np.ndarray | None = None) -> np.ndarray:
    """A float32 message [kind, payload...].  # (1 + n,)"""
    head = np.array([kind], dtype=np.float32)
    return head if payload is None else np.concatenate([head, payload.astype(np.float32)])
