"""hogwild.share.feed: seeded epoch orders, exactly-once tickets through the bounded queue, shards, resume positions."""
import threading
from collections import Counter

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from hogwild.share.feed import (BatchFeed, PartitionReader, QueueReader, as_sequence, epoch_order,
                                partition_order, tickets_per_item)
from hogwild.share.run_state import IN_PROGRESS, LAST_SEQ, TAKEN, SharedCounters


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


@pytest.mark.parametrize("n", [10, 64])  # one ticket per queue item, and chunks of 4
def test_two_consumers_take_every_batch_exactly_once_per_epoch_in_seeded_order(n):
    ctx, counters, stop = mp.get_context("spawn"), SharedCounters(2), threading.Event()
    feed = BatchFeed(ctx, n_batches=n, workers=2, epochs=3, seed=4, shuffle=True, depth=4)
    feed.start(stop.is_set)
    taken = [[], []]

    def consume(worker):
        reader = QueueReader(feed.queue, stop.is_set, counters.worker_view(worker))
        while (ticket := reader.next()) is not None:
            taken[worker].append(ticket)
            reader.done()

    threads = [threading.Thread(target=consume, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    feed.close()
    both = taken[0] + taken[1]
    assert Counter((epoch, index) for epoch, index in both) == Counter(
        (epoch, index) for epoch in range(3) for index in range(n))
    for worker in range(2):  # each consumer sees tickets in feed order
        expected = [(e, int(i)) for e in range(3) for i in epoch_order(n, 4, e, True)]
        assert taken[worker] == [t for t in expected if t in taken[worker]]
    assert counters.ints[:, TAKEN].sum() == 3 * n
    assert counters.snapshot().resume_seq(0) == 3 * n


def test_larger_data_sends_chunks_and_a_stop_mid_chunk_keeps_the_rest_for_resume():
    assert [tickets_per_item(n, 2) for n in (12, 16, 64, 1000)] == [1, 1, 4, 32]
    ctx, counters, stop = mp.get_context("spawn"), SharedCounters(2), threading.Event()
    feed = BatchFeed(ctx, n_batches=64, workers=2, epochs=1, seed=0, shuffle=False, depth=2)
    feed.start(stop.is_set)
    reader = QueueReader(feed.queue, stop.is_set, counters.worker_view(0))
    assert reader.next() == (0, 0)
    assert counters.ints[0, IN_PROGRESS] == 0 and counters.ints[0, LAST_SEQ] == 3  # holds tickets 0..3
    reader.done()
    assert counters.ints[0, IN_PROGRESS] == 1  # 1..3 received, not trained
    assert reader.next() == (0, 1)
    reader.done()
    stop.set()  # stop with tickets 2 and 3 still held
    assert reader.next() is None
    assert counters.snapshot().resume_seq(0) == 2
    feed.close()


def test_feed_resumes_at_a_sequence_number():
    ctx, stop = mp.get_context("spawn"), threading.Event()
    feed = BatchFeed(ctx, n_batches=10, workers=1, epochs=2, seed=4, shuffle=True, depth=20, start_seq=17)
    feed.start(stop.is_set)
    tickets = [feed.queue.get(timeout=5) for _ in range(4)]
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


def test_as_sequence():
    class Reiterable:
        def __iter__(self):
            return iter([torch.zeros(1), torch.ones(1)])

    assert [t.item() for t in as_sequence(Reiterable())] == [0.0, 1.0]
    with pytest.raises(ValueError, match="batches is empty"):
        as_sequence([])
    with pytest.raises(TypeError, match="sequence or re-iterable"):
        as_sequence(5)
