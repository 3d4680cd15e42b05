"""A small seeded parallel corpus and tagged corpus whose prepared data (vocabularies, dev split, dropped counts,
batches) were recorded from the in-memory pipeline of commit fa3934d (tests/data/reference_data.json): the streamed,
memory-mapped pipeline must reproduce them exactly.

The text is built to reach every branch that decides what a pair or a token becomes: Moses splitting (clitics,
punctuation, numbers, quotes), pairs with an empty or whitespace-only side, a side that Moses empties (a control
character), pairs over max_len on either side, tokens that spell the special symbols, and a small vocabulary cut
that falls among tokens of equal count, some first seen in a held-out pair.

No hogwild import: `python -c "import reference_corpus; ..."` runs against any checkout (see record()).

Usage: `write_parallel(folder)`; `write_tagged(folder)`; `NMT_CASES` / `POS_CASES` name the settings recorded.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

FR_WORDS = ("le", "la", "les", "des", "Parlement", "Commission", "vote", "l'Europe", "c'est", "d'accord", "nous",
            "aujourd'hui", "Monsieur", "président", "1,5", "%", "«", "»", "(", ")", "...", "&", "euros", "Mme",
            "<unk>", "<s>", "rapport", "États-membres", "qu'il", "n'est-ce")
EN_WORDS = ("the", "a", "Parliament", "Commission", "vote", "Europe", "it's", "agreed", "we", "today", "Mr",
            "President", "1.5", "%", '"', "(", ")", "...", "&", "euros", "Mrs", "<pad>", "report", "Member-States",
            "don't", "isn't", "<unk>")
PAIRS = 80
# (name, NmtDataConfig fields beyond train/dev paths) recorded; every case batches 4 pairs a batch, eval 3
NMT_CASES = {
    "moses-holdout": {"max_len": 12, "vocab_size": 20, "batch_size": 4, "eval_batch_size": 3, "seed": 3},
    "moses-dev-lowercase": {"max_len": 9, "vocab_size": 25, "lowercase": True, "train_limit": 70, "dev_limit": 6,
                            "batch_size": 4, "eval_batch_size": 3, "seed": 1, "dev": True},
    "moses-nolimit": {"max_len": None, "vocab_size": 1000, "min_freq": 2, "batch_size": 5, "eval_batch_size": 3,
                      "seed": 0, "dev_fraction": 0.2, "dev_size": 7},
    "bpe-holdout": {"max_len": 40, "vocab_size": 40, "subwords": "bpe", "subword_vocab_size": 60, "batch_size": 4,
                    "eval_batch_size": 3, "seed": 2},
}
POS_CASES = {
    "slash-holdout": {"batch_size": 3, "eval_batch_size": 4, "seed": 5, "word_min_freq": 2, "max_words": 12},
}


def _sentence(rng: random.Random, words: tuple[str, ...], length: int) -> str:
    tokens = [rng.choice(words) for _ in range(length)]
    text = " ".join(tokens)
    if rng.random() < 0.5:
        text += rng.choice((".", " ?", "!", ",", ":"))
    return text


def parallel_lines(seed: int = 7) -> tuple[list[str], list[str]]:
    """PAIRS aligned (fr, en) lines, 1..8 words (every 7th 10..20), with the special cases the module docstring
    lists."""
    rng = random.Random(seed)
    fr, en = [], []
    for i in range(PAIRS):
        length = rng.randint(10, 20) if i % 7 == 6 else rng.randint(1, 8)
        fr.append(_sentence(rng, FR_WORDS, length))
        en.append(_sentence(rng, EN_WORDS, max(1, length + rng.randint(-3, 3))))
    fr[5], en[17] = "", "   "  # an empty side, a whitespace-only side
    fr[23] = "\x07"  # Moses removes control characters: tokenized to nothing
    en[40] = "\t"
    return fr, en


def write_parallel(folder: Path) -> None:
    """train.fr / train.en (PAIRS lines) and dev.fr / dev.en (12 lines, one with an empty side)."""
    fr, en = parallel_lines()
    dev_fr, dev_en = parallel_lines(seed=8)
    dev_fr, dev_en = dev_fr[:12], dev_en[:12]
    dev_en[3] = ""
    for name, lines in (("train.fr", fr), ("train.en", en), ("dev.fr", dev_fr), ("dev.en", dev_en)):
        (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def write_tagged(folder: Path, seed: int = 9) -> Path:
    """A slash-tagged file of 40 sentences over a small vocabulary (ties at the max_words cut)."""
    rng = random.Random(seed)
    words = ("the/at", "dog/nn", "runs/vbz", "a/at", "cat/nn", "sleeps/vbz", "quickly/rb", "big/jj", "Fulton/np",
             "county/nn", ",/,", "./.", "said/vbd", "it/pps", "was/bedz", "of/in", "'s/$", "1,000/cd")
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(40)]
    path = folder / "tagged.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def nmt_settings(name: str, folder: Path) -> dict:
    """NmtDataConfig keyword arguments of a case for a corpus written to `folder` by write_parallel."""
    settings = dict(NMT_CASES[name])
    dev = settings.pop("dev", False)
    return dict(settings, train=str(folder / "train"), dev=str(folder / "dev") if dev else None, cache=False)


def pos_settings(name: str, path: Path) -> dict:
    return dict(POS_CASES[name], train=str(path), cache=False)


def nmt_record(dataset) -> dict:
    """What the reference keeps of an NmtDataset: counts, vocabularies, dev texts, train and dev batches."""
    return {"info": {key: dataset.info[key] for key in ("train", "dev", "train_pairs", "dev_pairs", "src_vocab",
                                                        "tgt_vocab", "train_src_tokens", "train_tgt_tokens")},
            "src_vocab": dataset.src_vocab.itos, "tgt_vocab": dataset.tgt_vocab.itos,
            "dev_sources": dataset.dev_sources, "dev_references": dataset.dev_references,
            "train": [batch_record(b) for b in dataset.train.batches()],
            "dev_batches": [batch_record(b) for b in dataset.dev.batches()]}


def pos_record(dataset) -> dict:
    return {"info": {key: dataset.info[key] for key in ("train_sentences", "dev_sentences", "train_tokens",
                                                        "dev_tokens", "words", "chars", "tags")},
            "words": dataset.words.itos, "chars": dataset.chars.itos, "tags": dataset.tags.itos,
            "train": [batch_record(b) for b in dataset.train.batches()],
            "dev_batches": [batch_record(b) for b in dataset.dev.batches()]}


def batch_record(batch: dict) -> dict:
    return {key: value if isinstance(value, int) else value.tolist() for key, value in batch.items()}


def record(out: Path, work: Path) -> None:
    """Write the reference JSON from whichever hogwild is importable (run with the old checkout first on sys.path)."""
    from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset
    from hogwild.data.pos_dataset import PosDataConfig, load_pos_dataset

    write_parallel(work)
    tagged = write_tagged(work)
    reference = {"nmt": {name: nmt_record(load_nmt_dataset(NmtDataConfig(**nmt_settings(name, work))))
                         for name in NMT_CASES},
                 "pos": {name: pos_record(load_pos_dataset(PosDataConfig(**pos_settings(name, tagged))))
                         for name in POS_CASES}}
    out.write_text(json.dumps(reference, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
