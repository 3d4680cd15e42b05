"""sentencepiece subwords: trained on training text, lossless decode, saved model reloads identically."""
import pickle

import pytest

from hogwild.data.subwords import SubwordModel
from hogwild.data.synthetic import synthetic_parallel

LINES = [" ".join(src) for src, _ in synthetic_parallel(400, seed=0)] + ["Ça coûte 3,5 € aujourd'hui."]


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_train_encode_decode_reload(tmp_path, model_type):
    model = SubwordModel.train(LINES, tmp_path / "spm.src", vocab_size=60, model_type=model_type)
    assert (tmp_path / "spm.src.model").is_file() and 20 < len(model) <= 60
    for line in LINES[:20] + [LINES[-1]]:
        pieces = model.encode(line)
        assert model.decode(pieces) == line
    assert model.encode_lines(LINES[:3]) == [model.encode(line) for line in LINES[:3]]
    again = pickle.loads(pickle.dumps(SubwordModel(tmp_path / "spm.src.model")))
    assert again.encode(LINES[5]) == model.encode(LINES[5])


def test_the_model_file_depends_on_the_text_not_the_path(tmp_path):
    first = SubwordModel.train(LINES, tmp_path / "a" / "spm.src", vocab_size=60)
    second = SubwordModel.train(LINES, tmp_path / "elsewhere" / "spm.tgt", vocab_size=60)
    assert first.path.read_bytes() == second.path.read_bytes()
    assert SubwordModel.train(LINES[:200], tmp_path / "b" / "spm", vocab_size=60).path.read_bytes() != \
        first.path.read_bytes()


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="model_type must be one of"):
        SubwordModel.train(LINES, tmp_path / "x", model_type="wordpiece")


def test_a_file_that_is_not_a_model_is_named(tmp_path):
    """sentencepiece said "INTERNAL: could not parse ModelProto from ..." (a RuntimeError)."""
    (tmp_path / "spm.src.model").write_text("translations\n")
    with pytest.raises(ValueError, match=rf"^{tmp_path}/spm\.src\.model: not a sentencepiece model file$"):
        SubwordModel(tmp_path / "spm.src.model")
    with pytest.raises(ValueError, match=rf"^{tmp_path}/none\.model: no such file$"):
        SubwordModel(tmp_path / "none.model")
