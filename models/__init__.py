"""The two models of the Hogwild paper, each an nn.Module plus a `loss(model, batch) -> (mean loss, tokens)` function
(packed sequences by default; `padded=True` for the path a CUDA graph can capture, padded_rnn.py) and evaluation
functions. Nothing here knows about parallelism (no torch.multiprocessing, no MPI) or reads text: the
batches are the dicts documented in data/batching.py, and evaluation takes id -> text callables as arguments.

Usage:
    from hogwild.models import POSTagger, pos_preset, pos_loss, evaluate_pos
    from hogwild.models import AttentionNMT, nmt_preset, nmt_loss, beam_search, evaluate_nmt
"""
from .attention import AdditiveAttention
from .nmt import AttentionNMT, EncoderOutput, NMTConfig, nmt_loss, nmt_preset
from .nmt_eval import BleuResult, corpus_bleu, evaluate_nmt, heldout_loss, translate
from .pos_eval import AccuracyCounts, evaluate_pos, predict_tags, tag_sentences
from .pos_tagger import POSConfig, POSTagger, pos_loss, pos_preset
from .search import beam_search, greedy_search

__all__ = [
    "AdditiveAttention", "AttentionNMT", "EncoderOutput", "NMTConfig", "nmt_loss", "nmt_preset",
    "BleuResult", "corpus_bleu", "evaluate_nmt", "heldout_loss", "translate",
    "AccuracyCounts", "evaluate_pos", "predict_tags", "tag_sentences",
    "POSConfig", "POSTagger", "pos_loss", "pos_preset",
    "beam_search", "greedy_search",
]
