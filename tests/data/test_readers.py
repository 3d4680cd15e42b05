"""readers: every format on hand-written fixtures, format detection, bad input, and the real corpora's counts."""
import gzip
import lzma
import pathlib
import shutil

import pytest

from hogwild.data.errors import CorpusError
from hogwild.data.readers import corpus_files, detect_format, read_tagged

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "data"


def test_conllu_skips_ranges_and_empty_nodes_and_picks_the_tag():
    path = FIXTURES / "tiny.conllu"
    assert read_tagged(path) == [[("In", "ADP"), ("dem", "DET"), ("Haus", "NOUN"), (".", "PUNCT")],
                                 [("Ich", "PRON"), ("lese", "VERB"), (".", "PUNCT")]]
    assert read_tagged(path, tag="xpos")[0] == [("In", "APPR"), ("dem", "ART"), ("Haus", "NN"), (".", "$.")]
    assert read_tagged(path, tag="xpos+feats") == [
        [("In", "APPR"), ("dem", "ART|Case=Dat|Gender=Neut|Number=Sing"), ("Haus", "NN|Case=Dat|Gender=Neut|Number=Sing"),
         (".", "$.")],
        [("Ich", "PPER|Case=Nom|Number=Sing|Person=1"), ("lese", "VVFIN|Mood=Ind|Tense=Pres"), (".", "$.")]]


def test_conll2000_columns():
    assert read_tagged(FIXTURES / "tiny.conll2000.txt") == [
        [("Confidence", "NN"), ("in", "IN"), ("the", "DT"), ("pound", "NN"), (".", ".")],
        [("Rockwell", "NNP"), ("said", "VBD"), ("1/2", "CD")]]
    chunks = read_tagged(FIXTURES / "tiny.conll2000.txt", format="conll", tag_column=3)
    assert [t for _, t in chunks[1]] == ["B-NP", "B-VP", "B-NP"]


def test_conllx_and_conll2009_default_columns():
    conllx = FIXTURES / "tiny.conllx"
    assert read_tagged(conllx, format="conll") == [[("Die", "ART"), ("Katze", "NN"), ("schläft", "VVFIN")],
                                                   [("Ja", "PTKANT")]]
    assert read_tagged(conllx, format="conll", tag="upos")[0] == [("Die", "ART"), ("Katze", "N"), ("schläft", "V")]
    assert read_tagged(conllx, format="conll", tag="xpos+feats")[0][2] == ("schläft", "VVFIN|3|sg|pres|ind")
    assert read_tagged(conllx, format="conll", tag="xpos+feats")[1] == [("Ja", "PTKANT")]  # FEATS "_"
    conll09 = FIXTURES / "tiny.conll09"
    assert read_tagged(conll09) == [[("Die", "ART"), ("Katze", "NN"), ("schläft", "VVFIN")]]
    assert read_tagged(conll09, tag="xpos+feats")[0][1] == ("Katze", "NN|case=nom|number=sg|gender=fem")
    assert read_tagged(conll09, word_column=3, tag_column=6)[0][2] == ("schlafen", "VVFIN")
    with pytest.raises(ValueError, match="no such column"):
        read_tagged(conll09, tag="upos")


def test_slash_folder_is_one_corpus_without_its_documentation():
    folder = FIXTURES / "slash"
    assert [p.name for p in corpus_files(folder)] == ["ca01", "ca02"]
    assert read_tagged(folder) == [[("The", "at"), ("dog", "nn"), ("barked", "vbd"), (".", ".")],
                                   [("A", "at"), ("1/2", "cd"), ("cat", "nn-tl"), ("ran", "vbd")],
                                   [("It", "pps"), ("rained", "vbd"), (".", ".")]]


def test_slash_with_another_separator(tmp_path):
    path = tmp_path / "underscore.txt"
    path.write_text("New_York_NNP is_VBZ big_JJ\n", encoding="utf-8")
    assert read_tagged(path, format="slash", separator="_") == [[("New_York", "NNP"), ("is", "VBZ"), ("big", "JJ")]]


@pytest.mark.parametrize("name,expected", [("tiny.conllu", "conllu"), ("tiny.conll2000.txt", "conll"),
                                           ("tiny.conllx", "conll"), ("tiny.conll09", "conll"), ("slash", "slash")])
def test_detect_format(name, expected):
    assert detect_format(FIXTURES / name) == expected


def test_detect_conllu_by_content_and_through_compression(tmp_path):
    body = (FIXTURES / "tiny.conllu").read_bytes()
    (tmp_path / "a.txt").write_bytes(body)                      # comments + 10 columns
    (tmp_path / "b.conllu.gz").write_bytes(gzip.compress(body))  # file name under .gz
    no_comments = b"\n".join(l for l in body.split(b"\n") if not l.startswith(b"#"))
    (tmp_path / "c.tsv").write_bytes(no_comments)               # UD tags in column 4
    assert [detect_format(tmp_path / n) for n in ("a.txt", "b.conllu.gz", "c.tsv")] == ["conllu"] * 3
    assert read_tagged(tmp_path / "b.conllu.gz") == read_tagged(FIXTURES / "tiny.conllu")


def test_a_fifo_or_a_broken_link_in_a_corpus_folder_is_named_not_skipped(tmp_path):
    """A FIFO inside a POS corpus folder was skipped without a word (its sentences missing from the corpus)."""
    import os

    (tmp_path / "ca01").write_text("The/at dog/nn ./.\n")
    (tmp_path / "notes").mkdir()  # a folder inside is not a data file: left alone
    os.mkfifo(tmp_path / "ca02")
    with pytest.raises(CorpusError, match=rf"^{tmp_path}/ca02: a FIFO, not a data file: every file of a corpus "
                                          r"folder is read \(move it out of the folder\)$"):
        corpus_files(tmp_path)
    (tmp_path / "ca02").unlink()
    (tmp_path / "ca03").symlink_to(tmp_path / "gone")
    with pytest.raises(CorpusError, match=rf"^{tmp_path}/ca03: a broken link, not a data file"):
        corpus_files(tmp_path)
    (tmp_path / "ca03").unlink()
    assert corpus_files(tmp_path) == [tmp_path / "ca01"]


def test_compressed_folder(tmp_path):
    for path in corpus_files(FIXTURES / "slash"):
        (tmp_path / (path.name + ".xz")).write_bytes(lzma.compress(path.read_bytes()))
    shutil.copy(FIXTURES / "slash" / "README", tmp_path / "README")
    assert read_tagged(tmp_path) == read_tagged(FIXTURES / "slash")


def test_undetectable_format(tmp_path):
    path = tmp_path / "prose.txt"
    path.write_text("Just some prose here.\nNot tagged at all, really.\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="cannot detect the format"):
        read_tagged(path)


# ---- bad input: each names the file and the line -------------------------------------------------------------------

def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_conllu_wrong_column_count(tmp_path):
    path = _write(tmp_path, "bad.conllu", "# x\n1\tDas\tder\tDET\tART\t_\t2\tdet\t_\t_\n2\tHaus\tHaus\tNOUN\n\n")
    with pytest.raises(CorpusError) as error:
        read_tagged(path)
    assert str(error.value) == f"{path}:3: expected 10 tab-separated CoNLL-U columns, found 4"


def test_conllu_missing_tag(tmp_path):
    path = _write(tmp_path, "fr.conllu", "1\tLe\tle\tDET\t_\t_\t2\tdet\t_\t_\n2\tchat\tchat\t_\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(CorpusError, match=r"fr\.conllu:1: missing XPOS tag for word 'Le'"):
        read_tagged(path, tag="xpos")
    with pytest.raises(CorpusError, match=r"fr\.conllu:2: missing UPOS tag for word 'chat'"):
        read_tagged(path)


def test_conllu_parse_error_is_a_corpus_error(tmp_path):
    path = _write(tmp_path, "ids.conllu", "1\tDas\tder\tDET\tART\tnot-a-feature\t2\tdet\t_\t_\n\n"
                                          "x\tHaus\tHaus\tNOUN\tNN\t_\tfoo\troot\t_\t_\n\n")
    with pytest.raises(CorpusError, match=r"ids\.conllu:\d+: "):
        read_tagged(path)


def test_conll_wrong_column_count_and_missing_tag(tmp_path):
    path = _write(tmp_path, "c.txt", "He PRP B-NP\nruns VBZ B-VP\n\nShe PRP\n")
    with pytest.raises(CorpusError) as error:
        read_tagged(path, format="conll")
    assert str(error.value) == f"{path}:4: expected 3 columns (as on the first token line), found 2"
    path = _write(tmp_path, "d.txt", "He PRP B-NP\nruns _ B-VP\n")
    with pytest.raises(CorpusError, match=r"d\.txt:2: missing tag for word 'runs' \(column 2\)"):
        read_tagged(path, format="conll")
    with pytest.raises(CorpusError, match=r"e\.txt:1: found 3 columns but column 5 is needed"):
        read_tagged(_write(tmp_path, "e.txt", "He PRP B-NP\n"), format="conll", tag_column=5)


def test_slash_token_without_tag(tmp_path):
    path = _write(tmp_path, "ca99", "The/at dog/nn\nA/at cat ran/vbd\n")
    with pytest.raises(CorpusError) as error:
        read_tagged(path, format="slash")
    assert str(error.value) == f"{path}:2: token 'cat' is not word/TAG"
    with pytest.raises(CorpusError, match=r"ca98:1: token 'dog/' is not word/TAG"):
        read_tagged(_write(tmp_path, "ca98", "The/at dog/\n"), format="slash")


def test_undecodable_bytes(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("Le DT\nchâteau NN\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin\.txt:2: cannot decode"):
        read_tagged(path, format="conll")
    assert read_tagged(path, format="conll", encoding="latin-1") == [[("Le", "DT"), ("château", "NN")]]


def test_empty_and_missing_corpora(tmp_path):
    with pytest.raises(CorpusError, match="empty corpus"):
        read_tagged(_write(tmp_path, "empty.conllu", "\n\n"), format="conllu")
    with pytest.raises(CorpusError, match="empty corpus"):
        read_tagged(_write(tmp_path, "blank.txt", "   \n"))
    with pytest.raises(CorpusError, match="nothing: corpus not found"):
        read_tagged(tmp_path / "nothing")
    docs_only = tmp_path / "docs"
    docs_only.mkdir()
    (docs_only / "README").write_text("x")
    with pytest.raises(CorpusError, match="no data files in folder"):
        read_tagged(docs_only)


def test_argument_validation():
    with pytest.raises(ValueError, match="format must be one of"):
        read_tagged(FIXTURES / "tiny.conllu", format="xml")
    with pytest.raises(ValueError, match="tag must be None or one of"):
        read_tagged(FIXTURES / "tiny.conllu", tag="lemma")
    with pytest.raises(ValueError, match="word_column is 1-based"):
        read_tagged(FIXTURES / "tiny.conll2000.txt", word_column=0)


# ---- the real corpora ----------------------------------------------------------------------------------------------

@pytest.mark.corpora
def test_brown(corpus):
    sentences = read_tagged(corpus("brown"))
    # SOURCE.md and the issue say 57,341; the 500 files hold 57,340 non-blank lines (NLTK's brown.sents() agrees).
    assert len(sentences) == 57_340
    assert sum(map(len, sentences)) == 1_161_192
    assert sentences[0][:3] == [("The", "at"), ("Fulton", "np-tl"), ("County", "nn-tl")]
    assert len({tag for s in sentences for _, tag in s}) == 472


@pytest.mark.corpora
def test_conll2000(corpus):
    train, test = read_tagged(corpus("conll2000") / "train.txt"), read_tagged(corpus("conll2000") / "test.txt")
    assert (len(train), len(test)) == (8_936, 2_012)
    assert (sum(map(len, train)), sum(map(len, test))) == (211_727, 47_377)
    assert train[0][:2] == [("Confidence", "NN"), ("in", "IN")]
    assert ("#", "#") in train[6]  # a "#" line is the pound sign, not a comment


@pytest.mark.corpora
def test_ud_german(corpus):
    gsd = corpus("ud-german-gsd")
    dev = read_tagged(gsd / "de_gsd-ud-dev.conllu", tag="xpos+feats")
    test = read_tagged(gsd / "de_gsd-ud-test.conllu", tag="xpos")
    assert (len(dev), len(test)) == (799, 977)
    assert (sum(map(len, dev)), sum(map(len, test))) == (12_480, 16_499)
    assert dev[0][0] == ("Manasse", "NN|Case=Nom|Gender=Fem|Number=Sing")
    lit = read_tagged(corpus("ud-german-lit"), tag="xpos")
    assert len(lit) == 1_920 and sum(map(len, lit)) == 40_450
    pud = read_tagged(corpus("ud-german-pud"))
    assert len(pud) == 1_000 and sum(map(len, pud)) == 21_332


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name", ["tiny.conllu", "tiny.conllx", "tiny.conll09", "tiny.conll2000.txt", "slash/ca01"])
def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path, name):
    plain = tmp_path / "plain" / pathlib.Path(name).name
    plain.parent.mkdir()
    plain.write_bytes((FIXTURES / name).read_bytes().replace(BOM, b""))
    for suffix, compress in (("", bytes), (".gz", gzip.compress)):  # every format, plain or compressed
        marked = tmp_path / f"marked{suffix}" / (plain.name + suffix)
        marked.parent.mkdir()
        marked.write_bytes(compress(BOM + plain.read_bytes()))
        assert detect_format(marked) == detect_format(plain)
        assert read_tagged(marked) == read_tagged(plain)
        assert not read_tagged(marked)[0][0][0].startswith("\ufeff")


def test_a_byte_order_mark_is_dropped_from_parallel_text(tmp_path):
    from hogwild.data.parallel import read_parallel
    (tmp_path / "train.fr").write_bytes(BOM + "Le chat dort .\nBonjour .\n".encode())
    (tmp_path / "train.en").write_bytes(BOM + "The cat sleeps .\nHello .\n".encode())
    corpus = read_parallel(tmp_path / "train", "fr", "en")
    assert corpus.src[0] == ["Le", "chat", "dort", "."] and corpus.tgt[0][0] == "The"
    assert corpus.src_lines[0] == "Le chat dort ." and corpus.tgt_lines[0] == "The cat sleeps ."
