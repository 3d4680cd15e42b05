"""Subword units with sentencepiece (BPE or unigram), trained on the training side; the model file goes with the run.

Usage: ``model = SubwordModel.train(train_lines, "run/spm.fr", vocab_size=8000, model_type="bpe")``;
``pieces = model.encode("Bonjour à tous")``; ``model.decode(pieces)`` -> ``"Bonjour à tous"``;
``SubwordModel("run/spm.fr.model")`` reloads it.

The project's Vocabulary (pad 0, unk 1, bos 2, eos 3) is built over the pieces, so sentencepiece's own ids are not used.
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from .errors import CorpusError

MODEL_TYPES = ("bpe", "unigram")


class SubwordModel:
    """A trained sentencepiece model; picklable (reloaded from its file)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self._processor = spm.SentencePieceProcessor(model_file=str(self.path))
        except RuntimeError as error:  # "INTERNAL: could not parse ModelProto from ...": named, as other files are
            reason = "no such file" if "NOT_FOUND" in str(error) else "not a sentencepiece model file"
            raise CorpusError(reason, path=self.path) from None

    def __getstate__(self):
        return {"path": str(self.path)}

    def __setstate__(self, state):
        self.__init__(state["path"])

    @classmethod
    def train(cls, lines: Iterable[str], prefix: str | os.PathLike, vocab_size: int = 8000,
              model_type: str = "bpe", max_sentences: int = 1_000_000) -> "SubwordModel":
        """Train on ``lines`` and write ``<prefix>.model``. ``vocab_size`` is a soft limit (small corpora get fewer
        pieces rather than an error). The file is a pure function of the lines and the settings (one thread, input
        order kept, no path recorded in it), so a resumed run rebuilds the same bytes wherever its cache lives."""
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
        if vocab_size < 8:
            raise ValueError(f"vocab_size must be >= 8, got {vocab_size}")
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=(line for line in lines if line.strip()), model_writer=model,
            vocab_size=vocab_size, model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
            input_sentence_size=max_sentences, shuffle_input_sentence=False, num_threads=1,
            pad_id=-1, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2)
        Path(f"{prefix}.model").write_bytes(model.getvalue())
        return cls(f"{prefix}.model")

    def encode(self, line: str) -> list[str]:
        return self._processor.encode(line, out_type=str)

    def encode_lines(self, lines: Sequence[str], lang: str = "") -> list[list[str]]:
        """Pieces of many lines (the ``tokenize(lines, lang)`` signature of data.parallel)."""
        return self._processor.encode(list(lines), out_type=str)

    def decode(self, pieces: Sequence[str]) -> str:
        return self._processor.decode(list(pieces))

    def __len__(self) -> int:
        return self._processor.get_piece_size()
