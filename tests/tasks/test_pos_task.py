"""tasks.pos_task: corpus options reach the readers (columns, several --train paths); sparse pulls train exactly."""
import dataclasses

import torch

import hogwild
from hogwild.tasks.options import RunOptions
from hogwild.tasks.pos_task import load_data, pos_job

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "data"


def test_explicit_columns_and_several_training_files(tmp_path):
    conll = str(FIXTURES / "tiny.conll2000.txt")
    dev = tmp_path / "dev.txt"  # the same text in another file (--dev may not be the --train file)
    dev.write_bytes((FIXTURES / "tiny.conll2000.txt").read_bytes())
    # column 3 holds the chunk label: choosing it must change the tag vocabulary
    chunks = load_data(RunOptions(task="pos", train=[conll, conll], dev=str(dev), format="conll", word_column=1,
                                  tag_column=3, batch_size=1))
    assert chunks.info["train_sentences"] == 2 * chunks.info["dev_sentences"]
    assert "B-NP" in chunks.tags.stoi and "NN" not in chunks.tags.stoi
    tags = load_data(RunOptions(task="pos", train=[conll], dev=str(dev), format="conll", word_column=1, tag_column=2,
                                batch_size=1))
    assert "NN" in tags.tags.stoi and "B-NP" not in tags.tags.stoi


def test_replicas_pull_only_the_sentences_rows_and_train_exactly_as_with_the_whole_table(tiny_pos):
    """run.py's POS config pulls sparsely on device workers; the tagger reads no row outside its batch (the
    replica raises if it does), and the parameters after training equal those of a replica pulling every row."""
    options = RunOptions(task="pos", train=[str(tiny_pos["train"])], dev=str(tiny_pos["dev"]), steps=60,
                         mode="single", seed=3, progress=False).resolved()
    dataset = load_data(options)
    run_py = options.engine_config(["cpu-replica"], "accuracy")
    assert run_py.sparse_pull is True
    finals = []
    for sparse_pull in (True, False):
        job = pos_job(options, dataset)
        config = dataclasses.replace(run_py, checkpoint_dir=None, eval_every=None, eval_every_seconds=None,
                                     tensorboard=False, sparse_pull=sparse_pull)
        assert hogwild.train(job.model, job.loss_fn, job.batches, config).updates == 60
        finals.append([p.detach().clone() for p in job.model.parameters()])
    for rows, whole in zip(*finals):
        torch.testing.assert_close(rows, whole, rtol=0, atol=0)
    assert RunOptions(task="pos", mode="sync").resolved().engine_config(["cpu-replica"] * 2, "accuracy").sparse_pull \
        is False  # sync averages whole tables
    assert RunOptions(task="nmt").resolved().engine_config(["cpu-replica"], "bleu").sparse_pull is False
