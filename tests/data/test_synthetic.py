"""Synthetic corpora: seeded, well-formed, and shaped so that character features and reordering matter."""
from collections import Counter

from hogwild.data.synthetic import synthetic_lexicon, synthetic_parallel, synthetic_tagged

SUFFIX_TAG = {"or": "NOUN", "um": "NOUN", "at": "VERB", "iz": "VERB", "ic": "ADJ", "al": "ADJ", "ly": "ADV"}


def test_tagged_is_seeded_and_suffix_driven():
    first, again, other = synthetic_tagged(300, seed=4), synthetic_tagged(300, seed=4), synthetic_tagged(300, seed=5)
    assert first == again and first != other
    assert len(first) == 300 and all(3 <= len(s) <= 16 for s in first)
    for sentence in first:
        assert sentence[-1] == (".", "PUNCT")
        for word, tag in sentence:
            if tag in ("NOUN", "VERB", "ADJ", "ADV"):
                assert SUFFIX_TAG[word[-2:]] == tag


def test_tagged_has_ambiguous_words_and_mostly_rare_words():
    sentences = synthetic_tagged(2000, seed=0)
    tags_of = {}
    for sentence in sentences:
        for word, tag in sentence:
            tags_of.setdefault(word, set()).add(tag)
    assert tags_of["ta"] == {"DET", "PRON"} and tags_of["po"] == {"ADP", "PART"}
    counts = Counter(word for s in sentences for word, _ in s)
    open_class = [w for w in counts if w[-2:] in SUFFIX_TAG]
    assert sum(counts[w] < 10 for w in open_class) / len(open_class) > 0.95


def test_parallel_is_a_lexical_mapping_with_adjective_reordering():
    lexicon = synthetic_lexicon(0)
    pairs = synthetic_parallel(200, seed=1)
    assert pairs == synthetic_parallel(200, seed=1)
    flat = {s: t for mapping in lexicon.values() for s, t in mapping.items()}
    for source, target in pairs:
        content = [flat[w] for w in source if w not in ("ne", "pas")]
        assert sorted(content) == sorted(w for w in target if w != "not")
        assert ("ne" in source) == ("not" in target)
    # det noun adj -> DET ADJ NOUN somewhere in the data
    noun, adj = sorted(lexicon["NOUN"])[0], sorted(lexicon["ADJ"])[0]
    assert any(s[1:3] == [noun, adj] and t[1:3] == [lexicon["ADJ"][adj], lexicon["NOUN"][noun]]
               for s, t in synthetic_parallel(3000, seed=2))
