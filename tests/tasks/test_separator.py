"""--separator (issue #14 item 8): a word_TAG corpus trains on its tags, and `run.py tag --separator _` writes them
back the same way; without the flag such a corpus is refused naming the token and its line."""
import pytest

from hogwild.data.errors import CorpusError
from hogwild.tasks.inference import tag_lines
from hogwild.tasks.options import RunOptions
from hogwild.tasks.pos_task import load_data


def test_a_word_underscore_tag_corpus_trains_on_its_tags(tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("New_York_NNP is_VBZ big_JJ\nA_DT dog/cat_NN runs_VBZ\n" * 5, encoding="utf-8")
    dev = tmp_path / "dev.txt"  # the same text in another file (--dev may not be the --train file)
    dev.write_bytes(corpus.read_bytes())
    options = RunOptions(task="pos", train=[str(corpus)], dev=str(dev), format="slash", separator="_",
                         batch_size=1).resolved()
    dataset = load_data(options)
    assert {"NNP", "VBZ", "JJ", "DT", "NN"} <= set(dataset.tags.stoi)
    assert dataset.info["train_sentences"] == 10
    with pytest.raises(CorpusError, match=r"train\.txt:1: token 'New_York_NNP' is not word/TAG"):
        load_data(RunOptions(task="pos", train=[str(corpus)], dev=str(dev), format="slash",
                             batch_size=1).resolved())


class _Tagger:
    def tag(self, sentences, batch_size):
        return [["T"] * len(sentence) for sentence in sentences]


def test_tag_output_uses_the_separator():
    assert tag_lines(_Tagger(), ["a b", "", "c"], separator="_") == ["a_T b_T", "", "c_T"]
    assert tag_lines(_Tagger(), ["a"]) == ["a/T"]
