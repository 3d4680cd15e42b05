"""Moses tokenization: exact tokens per language, detokenization round trips, lowercasing, the process pool."""
import pickle

import pytest

from hogwild.data.moses import MosesText, tokenize_lines


def test_french_and_english_tokens():
    assert MosesText("fr").tokenize("L'Europe, c'est nous & vous... 3,5 %") == \
        ["L'", "Europe", ",", "c'", "est", "nous", "&", "vous", "...", "3,5", "%"]
    assert MosesText("en").tokenize("I don't know, Mr. Smith.") == ["I", "don", "'t", "know", ",", "Mr.", "Smith", "."]


@pytest.mark.parametrize("lang,line", [
    ("en", "Madam President, I shall keep to the subject of the Minutes."),
    ("en", 'He said: "It is (very) important" - and left.'),
    ("fr", "Je déclare reprise la session du Parlement européen, qui avait été interrompue le jeudi 21 septembre."),
    ("fr", "Qu'en pensez-vous ? C'est l'heure !"),
])
def test_detokenize_inverts_tokenize(lang, line):
    moses = MosesText(lang)
    assert moses.detokenize(moses.tokenize(line)) == line


def test_lowercase_and_pickling():
    moses = MosesText("en", lowercase=True)
    assert moses.tokenize("The EU.") == ["the", "eu", "."]
    again = pickle.loads(pickle.dumps(moses))
    assert again.lang == "en" and again.lowercase and again.tokenize("A B") == ["a", "b"]
    with pytest.raises(ValueError, match="language code"):
        MosesText("")


def test_pool_matches_serial():
    lines = [f"Ligne numéro {i}, n'est-ce pas ?" for i in range(30)] + ["", "Fin."]
    serial = tokenize_lines(lines, "fr")
    assert serial[0] == ["Ligne", "numéro", "0", ",", "n'", "est-ce", "pas", "?"] and serial[30] == []
    assert tokenize_lines(lines, "fr", processes=2, chunk_size=7) == serial
