"""hogwild's data pipeline: corpus files -> tokens -> vocabularies -> tensorized, cached corpora -> batch dicts.

Usage: ``from hogwild.data.pos_dataset import synthetic_pos_dataset``; ``dataset = synthetic_pos_dataset()``;
``batches = dataset.train.batches()``

Modules (data flows down this list; none imports one below it):
- ``corpora``    corpora_dir(): where the real corpora live ($HOGWILD_CORPORA, else ../shared/corpora).
- ``errors``     CorpusError: bad input, named by file and line.
- ``compressed`` reading text files: .gz/.xz/.bz2 by suffix or magic bytes, an encoding, errors by line.
- ``readers``    read_tagged (CoNLL-U, CoNLL columns, slash-tagged), detect_format, corpus_files.
- ``parallel``   read_parallel: line-aligned parallel text, empty/too-long filters.
- ``moses``      Moses tokenization/detokenization (sacremoses), parallel over processes.
- ``subwords``   sentencepiece BPE/unigram models trained on the training side.
- ``vocab``      Vocabulary (pad 0, unk 1, bos 2, eos 3), top-K, min_freq, JSON.
- ``features``   prefix/suffix character ids for the POS tagger.
- ``batching``   TaggedData/ParallelData arrays, PosBatcher/NmtBatcher -> batch dicts (the contract: its docstring).
- ``cache``      ArrayCache: tensorized corpora on disk under $HOGWILD_CACHE.
- ``synthetic``  seeded synthetic tagging and translation corpora.
- ``pos_dataset``   PosDataConfig, load_pos_dataset, synthetic_pos_dataset -> PosDataset.
- ``nmt_dataset``   NmtDataConfig, load_nmt_dataset, synthetic_nmt_dataset -> NmtDataset.
- ``prepare``    ``python -m hogwild.data.prepare europarl|ud ...``: download with checksums, or take local files.
"""
from .errors import CorpusError

__all__ = ["CorpusError"]
