"""A device worker's copy-out (hogwild/worker/copy_out.py) on the CPU, uncaptured: a step moves only the rows of its
batch's ids, not the tables' whole capacity, and a seeded run with sparse embedding tables ends where the same run with
dense tables ends (plain SGD: a row no batch touched moves by nothing either way); a slot of page-locked staging is
written again only after the event of the copies that read it two steps before."""
import pytest
import torch

from hogwild.models.pos_tagger import POSConfig, POSTagger
from hogwild.share.run_state import SharedCounters
from hogwild.shared_optim import SharedOptimizer, trainable_parameters
from hogwild.worker import step_graph
from hogwild.worker.gradients import NonFiniteStreak
from hogwild.worker.step_graph import StepGraphs, shape_buckets, shape_counts
from hogwild.worker.updates import SkipRule, Update, Updater
from tests.hogwild.worker.test_step_graph import PADDED_POS, config, pos_batches, prepared, run_one


def tagger(sparse: bool):
    torch.manual_seed(0)
    return POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=4, word_emb=6, char_hidden=5, word_hidden=6,
                               word_layers=1, sparse_embeddings=sparse))


def test_a_step_copies_the_rows_of_its_ids_and_not_the_tables_capacity():
    batches = pos_batches()
    _, step, _ = prepared(lambda: tagger(True), PADDED_POS, batches)
    outbox = step.outbox
    for slot in outbox.host:
        slot.fill_(float("nan"))
    result, finite, _, grads = run_one(step, batches[0])
    counts = [len(chosen) for chosen in result.ids]
    assert finite and all(0 < n < entry.capacity for n, entry in zip(counts, outbox.sparse))
    host = outbox.host[0]
    for entry, n in zip(outbox.sparse, counts):
        rows = host[entry.rows].view(entry.capacity, -1)
        assert not rows[:n].isnan().any() and rows[n:].isnan().all()  # the capacity past this step's ids: not sent
    sent = sum(part.stop - part.start for part in outbox.segments(counts))
    dims = [step.params[entry.index].shape[1] for entry in outbox.sparse]
    assert sent == outbox.dense_end + sum(n * d for n, d in zip(counts, dims)) + len(host) - outbox.gradient_end
    assert sent < len(host)
    assert all(torch.isfinite(g.to_dense()).all() for g in grads if g is not None)


def trained(sparse: bool, batches: list, lr: float = 0.5, epochs: int = 2) -> list[torch.Tensor]:
    """A device worker's serial loop in this process, as worker.train_steps runs it: the prefetched pull (sparse tables
    pulled by rows), the step uncaptured, its copy-out, the shared optimizer's update (Updater, plain SGD)."""
    model = tagger(sparse).share_memory()
    step = StepGraphs(model, PADDED_POS, torch.device("cpu"), config(lr=lr, sparse_pull=True))
    step.prepare(batches, shapes=shape_buckets(shape_counts(batches), 8))
    shared = trainable_parameters(model)
    optimizer = SharedOptimizer(shared, "sgd")
    optimizer.attach(shared)
    view = SharedCounters(1).worker_view(0)
    updater = Updater(optimizer, shared, lambda version, epoch: lr, view, background=False,
                      skip=SkipRule(view, None, NonFiniteStreak(0, None)))
    for epoch in range(epochs):
        for batch in batches:
            clock = step.clocks[0]
            clock.mark()
            step.pull.prefetch(view.global_updates(), batch)
            version = step.pull.make_current()
            clock.mark()
            result = step.run(batch, 0, clock)
            updater.submit(Update(None, version, epoch, result.count, 0.0, [], result=result))
    assert view.global_updates() == epochs * len(batches)
    return [p.detach().clone() for p in model.parameters()]


def test_a_seeded_run_with_sparse_tables_ends_where_the_dense_tables_run_ends():
    """The device step with sparse tables (rows pulled, rows out, rows updated) against the same step with dense tables
    (the whole table pulled, its whole gradient out and applied): plain SGD, the same seeded model and batches."""
    batches = pos_batches()
    sparse, dense = trained(True, batches), trained(False, batches)
    assert all(not torch.equal(a, b) for a, b in zip(sparse, tagger(True).parameters()))  # every tensor trained
    for a, b in zip(sparse, dense):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)  # the dense gradient summed in another order


class LoggedEvent:
    log: list = []

    def __init__(self):
        self.slot = len([e for e in LoggedEvent.log if e[0] == "made"])
        LoggedEvent.log.append(("made", self.slot))

    def synchronize(self):
        LoggedEvent.log.append(("wait", self.slot))

    def record(self, stream=None):
        LoggedEvent.log.append(("record", self.slot))


def test_a_staging_slot_is_written_after_its_last_copies_and_marked_once_they_are_queued(monkeypatch):
    """What a GPU's step does with its page-locked inputs and ids, per slot: wait for that slot's event, write,
    queue the copies, record the event (a logged event stands for torch.cuda.Event)."""
    batches = pos_batches()
    _, step, _ = prepared(lambda: tagger(True), PADDED_POS, batches)
    monkeypatch.setattr(torch.cuda, "Event", LoggedEvent)
    LoggedEvent.log = []
    step.staged = step_graph.SlotEvents(cuda=True)
    writes = []
    step_ids = step.outbox.step_ids
    monkeypatch.setattr(step.outbox, "step_ids", lambda ids, slot: writes.append(slot) or step_ids(ids, slot))
    for index, slot in enumerate((0, 1, 0)):
        LoggedEvent.log.append(("step", index))
        run_one(step, batches[index], slot)
    steps = [entry for entry in LoggedEvent.log if entry[0] != "made"]
    assert steps == [("step", 0), ("wait", 0), ("record", 0), ("step", 1), ("wait", 1), ("record", 1),
                     ("step", 2), ("wait", 0), ("record", 0)]
    assert writes == [0, 1, 0]


@pytest.mark.parametrize("counts, expected", [([0, 0], 2), ([3, 2], 3)])
def test_segments_merge_what_is_contiguous(counts, expected):
    _, step, _ = prepared(lambda: tagger(True), PADDED_POS, pos_batches())
    parts = step.outbox.segments(counts)
    assert len(parts) == expected and parts[0].start == 0 and parts[-1].stop == len(step.outbox.outbox)
    assert all(a.stop < b.start for a, b in zip(parts, parts[1:]))
