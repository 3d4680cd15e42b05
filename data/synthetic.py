"""Seeded synthetic corpora for the built-in default run and fast tests; they feed the same batching as real corpora.

Usage: ``sentences = synthetic_tagged(2000, seed=0)``; ``pairs = synthetic_parallel(5000, seed=0)``
(ready-made tasks: ``data.pos_dataset.synthetic_pos_dataset()`` and ``data.nmt_dataset.synthetic_nmt_dataset()``).

Tagging: a small grammar over invented words. Open-class words are a random stem plus a suffix that decides the tag
(``-or/-um`` NOUN, ``-at/-iz`` VERB, ``-ic/-al`` ADJ, ``-ly`` ADV); stems are drawn from a large pool so most words
are rarer than the word vocabulary's min_freq and become UNK: only the character features can tag them. Two frequent
function words are ambiguous and need context: ``ta`` is DET before a noun phrase and PRON before a verb; ``po`` is
ADP before a noun phrase and PART at the end of a sentence.

Translation: a fixed, seeded word-for-word lexicon (source and target words are different invented strings) plus
reordering: the source puts adjectives AFTER their noun (like French), the target BEFORE it (like English), and a
source negation ``ne VERB pas`` becomes target ``not VERB``.
"""
from __future__ import annotations

import random

from .readers import TaggedSentence

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SUFFIXES = {"NOUN": ("or", "um"), "VERB": ("at", "iz"), "ADJ": ("ic", "al"), "ADV": ("ly",)}


def _syllables(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(low, high)))


def _unique_words(rng: random.Random, count: int, low: int, high: int, taken: set[str]) -> list[str]:
    words = []
    while len(words) < count:
        word = _syllables(rng, low, high)
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def synthetic_tagged(num_sentences: int, seed: int = 0, num_stems: int = 1500) -> list[TaggedSentence]:
    """``num_sentences`` tagged sentences (3-16 tokens) over tags DET PRON NOUN VERB ADJ ADV ADP PART PUNCT."""
    if num_sentences < 1 or num_stems < 1:
        raise ValueError(f"num_sentences and num_stems must be >= 1, got {num_sentences}, {num_stems}")
    rng = random.Random(seed)
    stems = _unique_words(random.Random(12345), num_stems, 2, 3, {"ta", "po", "ke", "mi"})

    def open_word(tag: str) -> tuple[str, str]:
        return rng.choice(stems) + rng.choice(_SUFFIXES[tag]), tag

    def noun_phrase() -> list[tuple[str, str]]:
        if rng.random() < 0.25:
            return [(rng.choice(("ta", "mi")), "PRON")]
        phrase = [(rng.choice(("ta", "ke")), "DET")]
        phrase += [open_word("ADJ") for _ in range(rng.choice((0, 0, 1, 2)))]
        return phrase + [open_word("NOUN")]

    sentences = []
    for _ in range(num_sentences):
        sentence = noun_phrase() + [open_word("VERB")]
        if rng.random() < 0.7:
            sentence += noun_phrase()
        if rng.random() < 0.3:
            sentence.append(open_word("ADV"))
        if rng.random() < 0.3:
            sentence += [("po", "ADP")] + noun_phrase()
        elif rng.random() < 0.2:
            sentence.append(("po", "PART"))
        sentences.append(sentence + [(".", "PUNCT")])
    return sentences


def synthetic_lexicon(seed: int = 0, nouns: int = 24, adjectives: int = 12, verbs: int = 12) -> dict[str, dict]:
    """The seeded source->target word maps per category: ``{"NOUN": {src: tgt}, "ADJ": ..., "VERB": ..., "DET": ...}``."""
    rng = random.Random(seed)
    taken = {"ne", "pas", "not"}
    lexicon = {}
    for category, count in (("DET", 3), ("NOUN", nouns), ("ADJ", adjectives), ("VERB", verbs)):
        source = _unique_words(rng, count, 1, 2, taken)
        target = [w.upper() for w in _unique_words(rng, count, 1, 2, taken)]  # upper case: never a source word
        lexicon[category] = dict(zip(source, target))
    return lexicon


def synthetic_parallel(num_pairs: int, seed: int = 0, lexicon_seed: int = 0) -> list[tuple[list[str], list[str]]]:
    """``num_pairs`` (source tokens, target tokens), 3-12 tokens each, with the lexicon of ``lexicon_seed``."""
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    lexicon = synthetic_lexicon(lexicon_seed)
    words = {category: sorted(mapping) for category, mapping in lexicon.items()}
    rng = random.Random(seed)

    def phrase() -> tuple[list[str], list[str]]:
        det, noun = rng.choice(words["DET"]), rng.choice(words["NOUN"])
        adjs = [rng.choice(words["ADJ"]) for _ in range(rng.choice((0, 1, 1, 2)))]
        source = [det, noun] + adjs                                  # det noun adj*  (French order)
        target = [lexicon["DET"][det]] + [lexicon["ADJ"][a] for a in reversed(adjs)] + [lexicon["NOUN"][noun]]
        return source, target

    pairs = []
    for _ in range(num_pairs):
        subject, obj = phrase(), phrase()
        verb = rng.choice(words["VERB"])
        if rng.random() < 0.3:
            source_verb, target_verb = ["ne", verb, "pas"], ["not", lexicon["VERB"][verb]]
        else:
            source_verb, target_verb = [verb], [lexicon["VERB"][verb]]
        pairs.append((subject[0] + source_verb + obj[0], subject[1] + target_verb + obj[1]))
    return pairs
