"""A device worker builds no batch to learn its batches' shapes or to size its sparse-row buffers: a BatchSet tells
them from its offsets (data/batch_set.py). Whole runs of one 'cpu-replica' worker (the device step, run uncaptured on
the CPU) on a POS BatchSet with sparse embedding tables, every batch build logged by the process that made it: with
graphs off, each batch is built once per step and nowhere else; with graphs on, once per step and once per graph (the
batch its capture runs on), where the start-up formerly built every batch twice (shapes, then buffer sizes)."""
import functools
import os

import pytest
import torch

import hogwild
from hogwild.data.batch_set import BatchSet
from hogwild.data.batching import PosBatcher
from hogwild.data.buckets import training_buckets
from hogwild.data.pos_dataset import synthetic_pos_dataset
from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss
from hogwild.worker.replica import batch_ids
from hogwild.worker.step_graph import StepGraphs, graph_shapes, shape_counts
from tests.hogwild.worker.test_step_graph import PADDED_POS, config, pos_batches, run_one, tiny_tagger


class LoggedBatcher(PosBatcher):
    """A PosBatcher that appends "pid" to `log` for each batch it builds, in whichever process builds it."""

    log: str = ""

    def batch(self, indices):
        with open(self.log, "a") as log:  # one short append per line: lines never interleave
            log.write(f"{os.getpid()}\n")
        return super().batch(indices)


def logged_batches(log, batch_size=2):
    """20 batches of the synthetic tagging task padded to POS's graph edges (a few shapes), every build logged."""
    train = synthetic_pos_dataset(num_train=40, seed=5, batch_size=batch_size).train
    batcher = LoggedBatcher(train.data, batch_size, seed=5, buckets=training_buckets("pos", fixed_shapes=True))
    batcher.log = str(log)
    return BatchSet(batcher)


def tagger(batches):
    words, chars = (int(max(getattr(batches.batcher.data, name).max() for name in names)) + 1 for names in
                    (("words",), ("prefixes", "suffixes")))
    torch.manual_seed(0)
    tags = int(batches.batcher.data.tags.max()) + 1
    return POSTagger(POSConfig(n_words=max(words, 5), n_chars=max(chars, 5), n_tags=tags, char_emb=4, word_emb=6,
                               char_hidden=5, word_hidden=6, word_layers=1, sparse_embeddings=True))


@pytest.mark.parametrize("graphs", ["off", "on"])
def test_a_device_worker_builds_no_batch_to_learn_the_shapes_or_size_its_buffers(tmp_path, graphs):
    log = tmp_path / "built.txt"
    batches = logged_batches(log)
    model = tagger(batches)
    assert any(m.sparse for m in model.modules() if isinstance(m, torch.nn.Embedding))  # buffers sized by ids
    config = hogwild.Config(devices=["cpu-replica"], graphs=graphs, epochs=1, optimizer="sgd", lr=0.1, seed=3,
                            sparse_pull=True, checkpoint_dir=None, tensorboard=False, progress=False)
    result = hogwild.train(model, functools.partial(pos_loss, padded=True), batches, config)
    built = log.read_text().splitlines()
    assert result.updates == len(batches) == 20 and len(set(built)) == 1 and built[0] != str(os.getpid())
    captured = len(graph_shapes(shape_counts(batches), None, epochs=1))  # the shapes used 4+ times
    assert result.graphs == (captured if graphs == "on" else 0) and captured >= 2
    assert len(built) == result.updates + result.graphs  # formerly + 40: every batch built twice at start-up


def test_a_dataset_that_cannot_tell_its_shapes_is_read_once_and_one_that_miscounts_is_named(tmp_path):
    batches = logged_batches(tmp_path / "built.txt")
    plain = [batches[i] for i in range(len(batches))]

    class Plain(torch.utils.data.Dataset):  # a user's Dataset without batch_shapes(): every batch built once
        def __len__(self):
            return len(plain)

        def __getitem__(self, index):
            if index >= len(plain):
                raise IndexError(index)
            return plain[index]

    class Miscounting(Plain):
        def batch_shapes(self):
            return batches.batch_shapes()[:1]

    assert shape_counts(Plain()) == shape_counts(batches) == shape_counts(plain)
    with pytest.raises(ValueError, match=r"Miscounting.batch_shapes\(\) counts \d+ batches, but it has 20"):
        shape_counts(Miscounting())


def test_a_dataset_that_tells_too_small_a_shape_stops_the_step_naming_the_capacity():
    """Told shapes size the sparse-row buffers: a batch with more distinct ids than they hold fails loudly."""
    batches = pos_batches()  # (2, 4) and (1, 4) word shapes

    class Undersold(torch.utils.data.Dataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, index):
            return batches[index]

        def batch_shapes(self):
            small = {key: value[(slice(0, 1),) * value.dim()] if torch.is_tensor(value) else value
                     for key, value in batches[0].items()}  # one element per tensor: a capacity of 5 ids
            return [(0, len(batches), small)]

    model = tiny_tagger().share_memory()
    step = StepGraphs(model, PADDED_POS, torch.device("cpu"), config(sparse_pull=True), graphs=False)
    step.prepare(Undersold())
    assert len(batch_ids(batches[1])) > 5
    with pytest.raises(RuntimeError, match=r"a batch holds \d+ distinct ids for a sparse table whose capacity is 5"):
        run_one(step, batches[1])
