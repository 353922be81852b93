import logging
import re

import pytest

from bert_whitening.data import DataError, detect_format, read_pairs, read_sentences


def write(tmp_path, name, text, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return str(path)


def test_pairs_are_read_with_float_labels_and_crlf_stripped(tmp_path):
    path = write(tmp_path, "p.data", "今天\t明天\t1\r\nhello\tworld\t3.5\n")
    assert list(read_pairs(path)) == [("今天", "明天", 1.0), ("hello", "world", 3.5)]
    assert detect_format(path) == "pairs"
    assert list(read_sentences(path)) == ["今天", "明天", "hello", "world"]


@pytest.mark.parametrize("line", ["only\ttwo", "a\tb\tc\td", "a\tb\tlabel"])
def test_a_malformed_pair_line_names_file_line_and_content(tmp_path, line):
    path = write(tmp_path, "bad.data", "a\tb\t0\n%s\nc\td\t1\n" % line)
    with pytest.raises(DataError, match=r"bad\.data:2: expected .*" + re.escape(repr(line))):
        list(read_pairs(path))


def test_skip_bad_lines_counts_them(tmp_path, caplog):
    path = write(tmp_path, "bad.data", "a\tb\t0\nbroken\nc\td\t1\nx\ty\n")
    with caplog.at_level(logging.WARNING):
        assert [p[0] for p in read_pairs(path, skip_bad_lines=True)] == ["a", "c"]
    assert "bad.data: skipped 2 malformed lines" in caplog.text


def test_sentence_files_keep_empty_lines_and_detect_as_lines(tmp_path):
    path = write(tmp_path, "s.txt", "first\n\nthird with\ta tab\n")
    assert detect_format(path) == "lines"
    assert list(read_sentences(path)) == ["first", "", "third with\ta tab"]


def test_empty_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(DataError, match="e.txt: empty input file"):
        detect_format(write(tmp_path, "e.txt", ""))
    with pytest.raises(DataError, match="nothing.txt: no such file"):
        list(read_sentences(str(tmp_path / "nothing.txt"), "lines"))
    with pytest.raises(DataError, match="gbk.txt: not UTF-8"):
        list(read_sentences(write(tmp_path, "gbk.txt", "今天天气\n", "gbk"), "lines"))
    with pytest.raises(ValueError, match="unknown input format 'csv'"):
        list(read_sentences(str(tmp_path / "e.txt"), "csv"))
