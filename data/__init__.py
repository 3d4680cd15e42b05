"""hogwild's data pipeline: corpus files -> tokens -> vocabularies -> cached, memory-mapped arrays -> batch dicts.

Usage: ``from hogwild.data.pos_dataset import synthetic_pos_dataset``; ``dataset = synthetic_pos_dataset()``;
``batches = dataset.train.batches()``

Modules (data flows down this list; none imports one below it):
- ``corpora``    corpora_dir(): where the real corpora live ($HOGWILD_CORPORA, else ../shared/corpora).
- ``errors``     CorpusError: bad input, named by file and line.
- ``compressed`` reading text files: .gz/.xz/.bz2 by suffix or magic bytes, an encoding, errors by line.
- ``readers``    read_tagged (CoNLL-U, CoNLL columns, slash-tagged), detect_format, corpus_files.
- ``parallel``   read_parallel, parallel_chunks: line-aligned parallel text, empty/too-long filters.
- ``moses``      Moses tokenization/detokenization (sacremoses), parallel over processes.
- ``subwords``   sentencepiece BPE/unigram models trained on the training side.
- ``vocab``      Vocabulary (pad 0, unk 1, bos 2, eos 3), top-K, min_freq, JSON.
- ``features``   prefix/suffix character ids for the POS tagger.
- ``mapped``     id arrays on disk: memory maps pickled by file name, written chunk by chunk, the smallest dtype.
- ``buckets``    LengthBuckets: the one rule padding a batch's lengths to a few shapes; a training run's buckets.
- ``batching``   TaggedData/ParallelData arrays, PosBatcher/NmtBatcher -> batch dicts (the contract: its docstring).
- ``batch_set``  BatchSet: a batcher's batches as a torch Dataset each worker indexes (what the engine is handed);
                its batches' shapes told from the offsets, no batch built.
- ``encoders``   NmtEncoder/PosEncoder: text <-> ids for training, held-out and new text; saved in a run directory.
- ``chunk_ids``  a pool worker's share of streamed preparation: one chunk tokenized, filtered, numbered.
- ``holdout``    the seeded held-out split of sentences or pairs, and the NMT held-out size.
- ``cache``      ArrayCache: prepared corpora on disk under $HOGWILD_CACHE, memory-mapped when loaded.
- ``streamed_nmt``  streamed NMT preparation: parallel files of any size -> a cache entry's id arrays.
- ``synthetic``  seeded synthetic tagging and translation corpora.
- ``pos_dataset``   PosDataConfig, load_pos_dataset, synthetic_pos_dataset -> PosDataset.
- ``nmt_dataset``   NmtDataConfig, load_nmt_dataset, synthetic_nmt_dataset -> NmtDataset.
- ``prepare``    ``python -m hogwild.data.prepare europarl|ud ...``: download with checksums, or take local files.
"""
from .errors import CorpusError

__all__ = ["CorpusError"]
