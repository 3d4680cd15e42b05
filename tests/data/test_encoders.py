"""data.encoders: POS and NMT text -> ids -> text, the same whether held by a dataset or loaded from a run folder
(lowercasing and sentencepiece pieces included)."""
import torch

from hogwild.data.encoders import NmtEncoder, PosEncoder
from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset
from hogwild.data.vocab import TAG_SPECIALS, Vocabulary


def test_encode_sentences_follows_the_batch_contract():
    words = Vocabulary(["the", "dog"])
    chars = Vocabulary(list("thedog"))
    batch = PosEncoder(words, chars, Vocabulary([], TAG_SPECIALS)).encode_sentences([["the", "dog"], ["cat"]])
    assert batch["words"].tolist() == [[4, 5], [1, 0]]  # unk 1 for 'cat', pad 0
    assert batch["lengths"].tolist() == [2, 1]
    assert batch["tags"].tolist() == [[-100, -100], [-100, -100]]
    t, h, e = chars.stoi["t"], chars.stoi["h"], chars.stoi["e"]
    assert batch["prefixes"][0, 0].tolist() == [t, h, e] + [0] * 7  # right-padded
    assert batch["suffixes"][0, 0].tolist() == [0] * 7 + [t, h, e]  # left-padded
    assert batch["prefixes"][1, 0].tolist() == [1, 1, chars.stoi["t"]] + [0] * 7  # c, a unknown chars
    assert batch["prefixes"].dtype == torch.int64 and batch["prefixes"].shape == (2, 2, 10)


def _corpus(folder):
    fr = [f"Le chat numéro {i} dort, n'est-ce pas ?" for i in range(40)]
    en = [f"The cat number {i} sleeps, doesn't it?" for i in range(40)]
    for name, lines in (("train.fr", fr), ("train.en", en), ("dev.fr", fr[:4]), ("dev.en", en[:4])):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_saved_nmt_encoder_encodes_and_decodes_as_the_dataset_did(tmp_path):
    _corpus(tmp_path)
    for kind, settings in (("moses", {"lowercase": True}), ("subwords", {"subwords": "bpe", "subword_vocab_size": 50})):
        dataset = load_nmt_dataset(NmtDataConfig(train=str(tmp_path / "train"), dev=str(tmp_path / "dev"),
                                                 cache=False, processes=1, **settings))
        run = tmp_path / kind
        dataset.save(run)
        loaded = NmtEncoder.load(run)
        assert loaded.text.kind == kind and loaded.src_vocab == dataset.src_vocab
        lines = ["Le Chat numéro 3 dort ?", "Un chien inconnu !"]
        assert torch.equal(loaded.encode_source(lines)["src"], dataset.encode_source(lines)["src"])
        row = dataset.dev.batch([1])["tgt"][0].tolist()
        assert loaded.decode(row) == dataset.decode(row) == dataset.dev_references[1]
    assert dataset.dev_references[1] == "The cat number 1 sleeps, doesn't it?"  # subwords: raw text back
    assert (tmp_path / "moses" / "text.json").read_text() == \
        '{"kind": "moses", "src_lang": "fr", "tgt_lang": "en", "lowercase": true}\n'
    assert sorted(p.name for p in (tmp_path / "subwords").glob("spm.*")) == ["spm.src.model", "spm.tgt.model"]


def test_source_batches_pad_with_zero_after_eos():
    batch = NmtEncoder.source_batch([[5, 6, 3], [7, 3]])
    assert batch["src"].tolist() == [[5, 6, 3], [7, 3, 0]]
    assert batch["src_mask"].tolist() == [[True, True, True], [True, True, False]]


def test_a_saved_pos_encoder_is_the_same_vocabularies(tmp_path):
    encoder = PosEncoder(Vocabulary(["the", "dog"]), Vocabulary(list("thedog")), Vocabulary(["DET"], TAG_SPECIALS))
    encoder.save(tmp_path)
    loaded = PosEncoder.load(tmp_path)
    assert (loaded.words, loaded.chars, loaded.tags) == (encoder.words, encoder.chars, encoder.tags)
    assert loaded.tensorize([[("the", "DET"), ("cat", "NOUN")]]).tags.tolist() == [2, 1]  # unseen tag -> unk
