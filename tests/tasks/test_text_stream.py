"""tasks/text_stream.py: input lines in bounded chunks (a chunk ends early when a pipe has nothing more ready), errors
named by file:line after the lines before them, and output written chunk by chunk (--output replaced whole, only on
success; a FIFO or a device written in place, a link's target replaced)."""
import io
import os
import stat
import threading

import pytest

from hogwild.tasks import text_stream
from hogwild.tasks.text_stream import InputError, TextOutput, read_chunks


def test_input_lines_lose_a_byte_order_mark_at_the_start_of_each_file(tmp_path):
    source = tmp_path / "in.txt"
    source.write_bytes(b"\xef\xbb\xbfLe chat dort .\r\nBonjour .\n")
    assert list(read_chunks([str(source)])) == [["Le chat dort .", "Bonjour ."]]
    assert list(read_chunks([str(source), str(source)])) == [["Le chat dort .", "Bonjour ."]] * 2


def test_chunks_hold_at_most_max_lines_or_max_bytes():
    text = b"".join(b"line %d\n" % i for i in range(7)) + b"last"  # 8 lines, the last without its newline
    assert list(read_chunks(["-"], stdin=io.BytesIO(text), max_lines=3)) == [
        ["line 0", "line 1", "line 2"], ["line 3", "line 4", "line 5"], ["line 6", "last"]]
    assert list(read_chunks(["-"], stdin=io.BytesIO(text), max_bytes=12)) == [
        ["line 0", "line 1"], ["line 2", "line 3"], ["line 4", "line 5"], ["line 6", "last"]]


def test_a_chunk_ends_where_a_pipe_has_nothing_more_ready(monkeypatch):
    """Two lines written, then the writer waits for their answers: they come as one chunk, without the end of input
    or a full chunk."""
    read, write = os.pipe()
    monkeypatch.setattr(text_stream, "_open", lambda path, stdin: text_stream._Lines("<stdin>", fd=read, owned=True))
    os.write(write, b"a b\nc d\n")
    chunks = read_chunks(["-"])
    assert next(chunks) == ["a b", "c d"]
    threading.Timer(0.2, lambda: (os.write(write, b"e\n"), os.close(write))).start()
    assert list(chunks) == [["e"]]


def test_a_bad_line_is_named_after_the_lines_before_it_are_handed_on(tmp_path):
    source = tmp_path / "in.txt"
    source.write_bytes(b"one\ntwo\n\xff\xfe\nfour\n")
    chunks = read_chunks([str(source)])
    assert next(chunks) == ["one", "two"]
    with pytest.raises(InputError, match=rf"^{source}:3: not valid utf-8 text \(invalid start byte at byte 0\); "
                                         r"give --encoding$"):
        next(chunks)
    words = io.BytesIO(b"a b\n" + b"w " * 4 + b"\n")
    with pytest.raises(InputError, match=r"^<stdin>:2: 4 words, more than the 3 a line may have; split long lines"):
        list(read_chunks(["-"], stdin=words, max_words=3))


def test_a_line_over_the_byte_bound_is_refused_without_reading_it_whole(monkeypatch):
    monkeypatch.setattr(text_stream, "MAX_LINE_BYTES", 100)
    endless = io.BytesIO(b"ok\n" + b"x" * 10_000)  # read 64 KiB at a time: the line is refused past 100 bytes
    chunks = read_chunks(["-"], stdin=endless)
    assert next(chunks) == ["ok"]
    with pytest.raises(InputError, match=r"^<stdin>:2: a line of more than 100 bytes \(is it text, one sentence"):
        next(chunks)


def test_every_file_is_opened_before_any_line_is_read(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with pytest.raises(InputError, match=rf"^{tmp_path}/missing\.txt: cannot read \(no such file or directory\)$"):
        next(read_chunks([str(tmp_path / "a.txt"), str(tmp_path / "missing.txt")]))
    with pytest.raises(InputError, match=rf"^{tmp_path}: cannot read \(is a directory\)$"):
        next(read_chunks([str(tmp_path)]))


def test_output_to_a_file_replaces_it_whole_and_only_on_success(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("previous\n")
    with pytest.raises(InputError):
        with TextOutput(str(path)) as output:
            output.write(["one", "two"])
            raise InputError("a bad line")
    assert path.read_text() == "previous\n" and os.listdir(tmp_path) == ["out.txt"]
    with TextOutput(str(path), conll=True) as output:
        output.write(["a\tX\n", "b\tY\n"])
        output.write(["c\tZ\n"])
    assert path.read_text() == "a\tX\n\nb\tY\n\nc\tZ\n"  # blank lines between blocks, across chunks too
    with pytest.raises(InputError, match=rf"^--output {tmp_path}: is a directory, not a file$"):
        TextOutput(str(tmp_path))



def test_output_that_is_a_stream_is_written_in_place_and_a_links_target_is_replaced(tmp_path):
    """--output a FIFO (or a device: /dev/stdout, /dev/full) is written as it goes: a file renamed over it replaced
    the device itself (run.py tag --output /dev/full, run as root, left /dev/full a regular file). A symbolic link
    keeps pointing at its target, which gets the answers."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()), daemon=True)
    reader.start()
    with TextOutput(str(fifo)) as output:
        output.write(["one", "two"])
    reader.join(30)
    assert read == ["one\ntwo\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("previous\n")
    link.symlink_to(target)
    with TextOutput(str(link)) as output:
        output.write(["three"])
    assert link.is_symlink() and target.read_text() == "three\n"
    assert sorted(os.listdir(tmp_path)) == ["fifo", "link.txt", "target.txt"]



def test_a_full_device_as_output_is_named_and_stays_a_device(tmp_path):
    """A node of /dev/full's device, made here (run.py tag --output /dev/full, as root, renamed a file over
    /dev/full itself): written in place, its error named once with the path (closing the file fails again on
    what the failed write left buffered: that bare second error replaced the first)."""
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError as error:
        pytest.skip(f"cannot make a device node here (needs root): {error}")
    with pytest.raises(OSError, match=rf"^{full}: cannot write: no space left on device"):
        with TextOutput(str(full)) as output:
            output.write(["one"])
    assert stat.S_ISCHR(os.lstat(full).st_mode) and os.listdir(tmp_path) == ["full"]


def test_output_keeps_the_replaced_files_mode_and_a_new_file_follows_the_umask(tmp_path):
    """mkstemp's 0600 reached every --output: private answers whatever the umask, and a replaced file lost its mode."""
    previous = os.umask(0o027)
    try:
        with TextOutput(str(tmp_path / "new.txt")) as output:
            output.write(["one"])
        kept = tmp_path / "kept.txt"
        kept.write_text("previous\n")
        kept.chmod(0o664)
        with TextOutput(str(kept)) as output:
            output.write(["two"])
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE(kept.stat().st_mode) == 0o664 and kept.read_text() == "two\n"
