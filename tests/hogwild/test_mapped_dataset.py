"""docs/library.md's dataset larger than memory, run as written: a torch Dataset over a memory-mapped .npy of token ids,
trained by two workers (one in place, one on a replica) that each map the file. The parent never builds a batch, the
batch store holds no token, and every batch is built once per step that trains it, in a worker; the example's
batch_shapes() tells the one shape of its batches without building one."""
import os
import pathlib
import re

import numpy as np
import torch
import torch.nn.functional as F

import hogwild
from hogwild.share.batch_store import BatchStore
from hogwild.worker.step_graph import batch_signature, shape_counts

DOC = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "library.md").read_text(encoding="utf-8")
EXAMPLE = next(block for block in re.findall(r"```python\n(.*?)```", DOC, re.S) if "class TokenWindows" in block)
exec(EXAMPLE)  # noqa: S102 - defines TokenWindows here, at module level: the spawned workers import it from here
VOCAB = 47


class CountedWindows(TokenWindows):  # noqa: F821 - defined by the example
    built = 0  # batches built in this process
    log = None  # a file every process appends "pid index" to for each batch it builds (pickled with the dataset)

    def __getitem__(self, index):
        CountedWindows.built += 1
        if self.log is not None:
            with open(self.log, "a") as log:  # one short append per line: the workers' lines never interleave
                log.write(f"{os.getpid()} {index}\n")
        return super().__getitem__(index)


def next_token_loss(model, batch):
    logits = model(batch["input"])  # (B, T, VOCAB)
    return F.cross_entropy(logits.reshape(-1, VOCAB), batch["target"].reshape(-1)), batch["target"].numel()


def test_workers_train_on_a_mapped_dataset_that_the_parent_never_indexes(tmp_path):
    ids = np.arange(16 * 33 * 30) % VOCAB  # 30 batches of 16 x 33 ids; the next id is always predictable
    np.save(tmp_path / "ids.npy", ids)
    dataset = CountedWindows(tmp_path / "ids.npy")
    assert len(dataset) == 30  # batch 2 starts at id 1056, which is 22 mod 47:
    assert torch.equal(dataset[2]["target"][0, :3], torch.tensor([23, 24, 25]))
    built = [dataset[i] for i in range(len(dataset))]
    CountedWindows.built = 0
    assert shape_counts(dataset) == shape_counts(built) == [(batch_signature(built[0]), 0, 30)]
    assert CountedWindows.built == 0  # the example's batch_shapes(): what a device worker asks, no batch built
    dataset.log = str(tmp_path / "built.txt")
    store = BatchStore(dataset, str(tmp_path))  # what the engine writes: the object, not its batches
    assert (tmp_path / "batches.pkl").stat().st_size < 500 and torch.load(store.path) == {}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB))
    config = hogwild.Config(workers=2, devices=["cpu", "cpu-replica"], epochs=2, lr=0.5, checkpoint_dir=None,
                            tensorboard=False, progress=False)  # in place, and the device step on a replica
    result = hogwild.train(model, next_token_loss, dataset, config)
    assert CountedWindows.built == 0  # every batch was built in a worker, from its own map of the file
    built = [line.split() for line in (tmp_path / "built.txt").read_text().splitlines()]
    # once per step (not for the pull again, nor a start-up scan of every batch), in the 2 workers
    assert len(built) == 60 and len({pid for pid, _ in built}) == 2
    assert sorted(int(index) for _, index in built) == sorted(list(range(30)) * 2)  # each batch once an epoch
    assert result.updates == 60 and result.examples == 60 * 16 * 32
    assert result.final_loss < 0.5 * np.log(VOCAB)  # it learned: the workers read the real ids
