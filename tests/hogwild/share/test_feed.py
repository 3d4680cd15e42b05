"""hogwild.share.feed: seeded epoch orders, exactly-once tickets through each worker's bounded queue, a dead
worker's tickets dealt again once, max_steps dealt exactly, shards, resume positions."""
import threading
import time
from collections import Counter

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from hogwild.share.feed import (BatchFeed, PartitionReader, QueueReader, as_sequence, epoch_order, partition_order,
                                tickets_per_item)
from hogwild.share.stream import STREAM_EPOCH, ArrivingBatches, StreamFeed, is_streamed
from hogwild.share.run_state import IN_PROGRESS, LAST_SEQ, TAKEN, UPDATES, SharedCounters


def test_epoch_order_is_a_seeded_permutation():
    first = epoch_order(10, seed=7, epoch=0, shuffle=True)
    assert sorted(first.tolist()) == list(range(10))
    assert first.tolist() == epoch_order(10, seed=7, epoch=0, shuffle=True).tolist()
    assert first.tolist() != epoch_order(10, seed=7, epoch=1, shuffle=True).tolist()
    assert first.tolist() != epoch_order(10, seed=8, epoch=0, shuffle=True).tolist()
    assert epoch_order(4, seed=7, epoch=3, shuffle=False).tolist() == [0, 1, 2, 3]


def test_partition_shards_are_fixed_disjoint_and_cover_the_batches():
    shards = [partition_order(11, 3, w, seed=1, epoch=0, shuffle=True) for w in range(3)]
    assert sorted(np.concatenate(shards).tolist()) == list(range(11))
    assert sorted(shards[1].tolist()) == [1, 4, 7, 10]
    assert sorted(partition_order(11, 3, 1, seed=1, epoch=5, shuffle=True).tolist()) == [1, 4, 7, 10]
    assert partition_order(11, 3, 2, seed=1, epoch=0, shuffle=False).tolist() == [2, 5, 8]


def _consume(feed, worker, counters, stop, taken, skip=()):
    """A worker's loop without the training: each ticket counted done (applied, or skipped when its seq is in skip)."""
    view = counters.worker_view(worker)
    reader = QueueReader(feed.mailbox(worker), stop.is_set, view)
    while (ticket := reader.next()) is not None:
        taken[worker].append(ticket)
        if int(counters.ints[worker, IN_PROGRESS]) in skip:
            view.skipped()
        else:
            view.applied(0, 1, 0.0, 0.1)
        reader.done()


def _consume_all(feed, counters, stop, skip=()):
    """Two consumer threads until the feed ends them: (what each took, whether one is still running after 10 s)."""
    taken = [[], []]
    threads = [threading.Thread(target=_consume, args=(feed, w, counters, stop, taken, skip)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return taken, any(thread.is_alive() for thread in threads)


def _feed(workers, **kwargs):
    ctx, counters, stop = mp.get_context("spawn"), SharedCounters(workers), threading.Event()
    kwargs = {"epochs": 1, "seed": 4, "shuffle": True, "depth": 4, **kwargs}
    feed = BatchFeed(ctx, workers=workers, counters=counters, **kwargs)
    return feed, counters, stop


@pytest.mark.parametrize("n", [10, 64])  # one ticket per queue item, and chunks of 4
def test_two_consumers_take_every_batch_exactly_once_per_epoch_in_seeded_order(n):
    feed, counters, stop = _feed(2, n_batches=n, epochs=3)
    feed.start(stop.is_set)
    taken, _ = _consume_all(feed, counters, stop)
    both = taken[0] + taken[1]
    assert Counter((epoch, index) for epoch, index in both) == Counter(
        (epoch, index) for epoch in range(3) for index in range(n))
    for worker in range(2):  # each consumer sees tickets in feed order
        expected = [(e, int(i)) for e in range(3) for i in epoch_order(n, 4, e, True)]
        assert taken[worker] == [t for t in expected if t in taken[worker]]
    assert counters.ints[:, TAKEN].sum() == 3 * n
    assert feed.resume_seq() == 3 * n
    stop.set()
    feed.close()


def test_larger_data_sends_chunks_and_a_stop_mid_chunk_keeps_the_rest_for_resume():
    assert [tickets_per_item(n, 2) for n in (12, 16, 64, 1000)] == [1, 1, 4, 32]
    feed, counters, stop = _feed(2, n_batches=64, shuffle=False, depth=2)
    feed.start(stop.is_set)
    view = counters.worker_view(0)
    reader = QueueReader(feed.mailbox(0), stop.is_set, view)
    assert reader.next() == (0, 0)
    assert counters.ints[0, IN_PROGRESS] == 0 and counters.ints[0, LAST_SEQ] == 3  # holds tickets 0..3
    view.applied(0, 1, 0.0, 0.1)
    reader.done()
    assert counters.ints[0, IN_PROGRESS] == 1  # 1..3 received, not trained
    assert reader.next() == (0, 1)
    view.applied(0, 1, 0.0, 0.1)
    reader.done()
    stop.set()  # stop with tickets 2 and 3 still held (and worker 1's queue never read)
    assert reader.next() is None
    assert feed.resume_seq() == 2
    feed.close()


def test_a_dead_workers_uncounted_tickets_are_dealt_again_first_and_each_is_counted_once():
    """Worker 0 counts 1 of its tickets, and dies with the rest received, queued or mid-step: they go back to the
    front of the line; worker 1 and worker 0's replacement then count every ticket of the 2 epochs exactly once.
    One dealing round (the dealer thread's work) is run by hand first, so that the death comes after a count the
    dealer has not seen: reassign itself must tell the counted ticket from the others."""
    feed, counters, stop = _feed(2, n_batches=64, epochs=2, shuffle=False)
    with feed._lock:
        feed._round()
    view = counters.worker_view(0)
    reader = QueueReader(feed.mailbox(0), stop.is_set, view)
    assert reader.next() == (0, 0)
    view.applied(0, 1, 0.0, 0.1)
    reader.done()
    assert reader.next() == (0, 1)  # taken; its step never counts: the worker "dies" here
    feed.reassign(0)  # as the supervisor does once the process is reaped
    assert feed.resume_seq() == 1
    feed.start(stop.is_set)
    taken, _ = _consume_all(feed, counters, stop)
    again = taken[0] + taken[1]
    assert Counter(again) + Counter([(0, 0)]) == Counter((e, i) for e in range(2) for i in range(64))
    assert counters.tickets_done().sum() == 128 and feed.resume_seq() == 128
    [got] = [tickets for tickets in taken if (0, 1) in tickets]
    first = got.index((0, 1))  # the returned tickets were dealt again as they had been, in one item:
    assert got[first:first + 3] == [(0, 1), (0, 2), (0, 3)]
    stop.set()
    feed.close()


def test_max_steps_deals_exactly_the_updates_left_and_a_skipped_one_frees_its_slot():
    """12 updates done already, max_steps 20: 8 tickets are dealt; the skipped one (seq 3) is replaced by the next
    ticket; then every worker gets its end."""
    counters = SharedCounters(2)
    counters.ints[0, UPDATES] = 12
    ctx, stop = mp.get_context("spawn"), threading.Event()
    feed = BatchFeed(ctx, 10, 2, epochs=None, seed=0, shuffle=False, depth=4, counters=counters, max_steps=20)
    feed.start(stop.is_set)
    taken, still_running = _consume_all(feed, counters, stop, {3})
    assert not still_running
    assert sorted(taken[0] + taken[1]) == [(0, i) for i in range(9)]
    assert counters.snapshot().updates() == 20 and counters.skipped_total() == 1
    stop.set()
    feed.close()


def test_feed_resumes_at_a_sequence_number():
    feed, counters, stop = _feed(1, n_batches=10, epochs=2, depth=20, start_seq=17)
    feed.start(stop.is_set)
    tickets = [feed.queues[0].get(timeout=5) for _ in range(4)]
    stop.set()
    feed.close()
    order = epoch_order(10, 4, 1, True)
    assert tickets == [[(17, 1, int(order[7]))], [(18, 1, int(order[8]))], [(19, 1, int(order[9]))], None]


def test_partition_reader_walks_its_shard_and_resumes_mid_epoch():
    counters, never = SharedCounters(2), (lambda: False)
    reader = PartitionReader(7, 2, 1, epochs=2, seed=0, shuffle=True, stopped=never,
                             view=counters.worker_view(1), epoch=1, position=1)
    seen = []
    while (ticket := reader.next()) is not None:
        seen.append(ticket)
        reader.done()
    assert seen == [(1, int(i)) for i in partition_order(7, 2, 1, 0, 1, True)[1:]]
    assert counters.ints[1, TAKEN] == 2


def test_what_is_stored_and_what_is_streamed():
    class Reiterable:
        def __iter__(self):
            return iter([torch.zeros(1), torch.ones(1)])

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([torch.zeros(1)])

        def __len__(self):  # an IterableDataset is iterated, even with a length
            return 1

    assert [is_streamed(b) for b in ([1], (1,), torch.utils.data.TensorDataset(torch.zeros(2)), Reiterable(),
                                     Batches(), iter([1]), (b for b in [1]), {1: 2}.values())] == \
        [False, False, False, True, True, True, True, True]
    assert as_sequence([torch.zeros(1)])[0].item() == 0.0
    with pytest.raises(ValueError, match="batches is empty"):
        as_sequence([])
    with pytest.raises(TypeError, match="a sequence, a torch Dataset or an iterable of batches, got int"):
        is_streamed(5)


class Counting(torch.utils.data.IterableDataset):
    """Batches tensor([0]) .. tensor([n - 1]) a pass, `read` counting every batch taken from it (all passes); `fail_at`:
    raise at that batch."""

    def __init__(self, n, fail_at=None):
        self.n, self.read, self.fail_at = n, 0, fail_at

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise ValueError(f"batch {i} could not be read")
            self.read += 1
            yield torch.tensor([i])


def _stream_feed(stream, workers, **kwargs):
    ctx, counters, stop = mp.get_context("spawn"), SharedCounters(workers), threading.Event()
    feed = StreamFeed(ctx, stream, workers=workers, counters=counters, **{"epochs": 1, "depth": 4, **kwargs})
    return feed, counters, stop


_arriving = threading.Lock()  # the consumer threads share this process's ArrivingBatches


def _consume_stream(feed, worker, counters, stop, taken):
    view, batches = counters.worker_view(worker), ArrivingBatches()
    reader = QueueReader(feed.mailbox(worker), stop.is_set, view)
    while True:
        with _arriving:
            ticket = reader.next()
            if ticket is None:
                return
            taken[worker].append((ticket[0], batches[ticket[1]].item()))
        view.applied(0, 1, 0.0, 0.1)
        reader.done()


def test_a_stream_is_dealt_a_pass_per_epoch_each_batch_once_with_its_ticket():
    stream = Counting(9)
    feed, counters, stop = _stream_feed(stream, 2, epochs=2)
    feed.start(stop.is_set)
    taken = [[], []]
    threads = [threading.Thread(target=_consume_stream, args=(feed, w, counters, stop, taken)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert Counter(taken[0] + taken[1]) == Counter((epoch, i) for epoch in range(2) for i in range(9))
    assert stream.read == 18 and feed.resume_seq() == STREAM_EPOCH + 9  # after pass 1 (of 0, 1): its end
    assert len(ArrivingBatches()) == 0 and list(ArrivingBatches()) == []
    stop.set()
    feed.close()


def test_a_stream_is_read_only_as_far_as_the_queues_have_room_and_a_resume_skips_what_was_taken():
    """Nobody reads the queue: the dealer takes from an endless-looking stream only what the queue holds (bounded
    memory); a feed resumed at pass 1, position 3 reads 3 batches of that pass again without dealing them."""
    stream = Counting(1000)
    feed, counters, stop = _stream_feed(stream, 1, epochs=None, depth=4)
    feed.start(stop.is_set)
    time.sleep(0.5)
    assert stream.read <= feed.depth + 2  # the queue's items, one read ahead, one in the queue's feeder
    stop.set()
    feed.close()
    resumed = Counting(5)
    feed, counters, stop = _stream_feed(resumed, 1, epochs=2, start_seq=STREAM_EPOCH + 3)
    feed.start(stop.is_set)
    taken = [[]]
    _consume_stream(feed, 0, counters, stop, taken)
    assert taken == [[(1, 3), (1, 4)]] and resumed.read == 5
    feed.close()


def test_a_dead_workers_streamed_batches_are_dealt_again_and_a_failing_stream_is_named():
    stream = Counting(6)
    feed, counters, stop = _stream_feed(stream, 2)
    with feed._lock:
        feed._read_ahead()
        feed._round()  # each worker is dealt a batch: worker 0 the first
    feed.reassign(0)  # worker 0 died before counting it done
    assert [ticket[:3] + (ticket[3].item(),) for ticket in feed._returned] == [(0, 0, 0, 0)]
    failing = Counting(6, fail_at=2)
    feed, counters, stop = _stream_feed(failing, 1)
    failed = threading.Event()
    feed.start(stop.is_set, failed.set)
    assert failed.wait(10)
    assert feed.error.startswith("Traceback") and feed.error.endswith("ValueError: batch 2 could not be read")
    stop.set()
    feed.close()


def test_a_pass_that_gives_nothing_ends_the_data_with_a_warning():
    once = (torch.tensor([i]) for i in range(3))  # a generator: read once
    feed, counters, stop = _stream_feed(once, 1, epochs=3)
    with pytest.warns(RuntimeWarning, match="the batches gave none in pass 2: the data ends there"):
        feed.start(stop.is_set)
        taken = [[]]
        _consume_stream(feed, 0, counters, stop, taken)
    assert taken == [[(0, 0), (0, 1), (0, 2)]]
    feed.close()
