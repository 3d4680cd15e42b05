"""Serial tests of transfers in pieces (hogwild.multihost.pieces) and of how MPITransport hears a peer through them,
with stand-ins for MPI requests (no MPI needed; the same code over real TCP: test_distributed_network.py)."""
import numpy as np

from hogwild.multihost.dist_config import DistConfig
from hogwild.multihost.pieces import Pieces, piece_bounds
from hogwild.multihost.transport import MPITransport


class _Request:
    """An MPI request stand-in that completes at its `after`-th Test()."""

    def __init__(self, log: list, name: str, after: int) -> None:
        self.log, self.name, self.after, self.tests = log, name, after, 0

    def Test(self) -> bool:
        self.tests += 1
        self.log.append(self.name)
        return self.tests >= self.after


def _transport(peers: list[int]) -> MPITransport:
    """An MPITransport's bookkeeping only: what test() and wait() use, without MPI."""
    t = object.__new__(MPITransport)
    t.dist = DistConfig(algorithm="allreduce", timeout_seconds=60.0)
    t._last_seen = {q: 0.0 for q in peers}
    t._call = lambda peer, what, operation: operation()
    return t


def test_pieces_are_posted_in_order_at_most_in_flight_at_a_time():
    log, posted = [], []

    def start(i):
        posted.append(i)
        return _Request(log, f"piece {i}", after=1)

    transfer = Pieces([lambda i=i: start(i) for i in range(5)], in_flight=2, sent=10)
    assert posted == [0, 1]
    assert transfer.test() is True and posted == [0, 1, 2, 3, 4] and transfer.done
    assert piece_bounds(np.zeros(3, dtype=np.float32)) == [(0, 3)]


def test_a_piece_received_is_a_sign_of_life_of_its_sender_and_a_send_is_not():
    t, log = _transport([1, 2]), []
    receive = Pieces([lambda: _Request(log, "in", after=1)], senders=[1])
    send = Pieces([lambda: _Request(log, "out", after=1)], peer=2)
    assert t.test(receive) and t.test(send)
    assert t._last_seen[1] == receive.progressed > 0.0 and t._last_seen[2] == 0.0


def test_a_wait_advances_every_request_so_a_later_receive_is_heard_while_an_earlier_send_is_stuck():
    """The first request (a send) completes only at its 5th test; the second, a receive from rank 1 in 3 pieces,
    completes a piece at each test: rank 1 is heard from the first round of the wait on, not once the send is done."""
    t, log = _transport([1]), []
    send = Pieces([lambda: _Request(log, "send", after=5)], peer=1)
    receive = Pieces([lambda: _Request(log, "receive", after=1) for _ in range(3)], in_flight=1, senders=[1])
    heard = []
    t.service = lambda: heard.append(t._last_seen[1])
    t.wait([send, receive], "an exchange")
    assert send.done and receive.done
    assert heard[0] > 0.0, heard  # after the wait's first round
    assert log[:2] == ["send", "receive"]
