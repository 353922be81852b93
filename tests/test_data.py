import logging
import os
import re

import pytest

from bert_whitening.data import DataError, read_pairs, read_sentences

from helpers import shared_data


def write(tmp_path, name, text, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return str(path)


def test_pairs_are_read_with_float_labels_and_crlf_stripped(tmp_path):
    path = write(tmp_path, "p.data", "今天\t明天\t1\r\nhello\tworld\t3.5\nx\ty\t-.5e1\nz\tw\t 2. \n")
    assert list(read_pairs(path)) == [("今天", "明天", 1.0), ("hello", "world", 3.5), ("x", "y", -5.0), ("z", "w", 2.0)]
    assert list(read_sentences(path)) == ["今天", "明天", "hello", "world", "x", "y", "z", "w"]


@pytest.mark.parametrize(
    "line",
    [
        "only\ttwo",
        "a\tb\tc\td",
        "a\tb\tlabel",
        "a\tb\tnan",
        "a\tb\t-inf",
        "a\tb\t1_0",
        "a\tb\t\uff13",
        "a\tb\t\u0663",
        "a\tb\t1e400",
        "a\tb\t1\t2",  # four fields, the third a number
    ],
)
def test_a_malformed_pair_line_names_file_line_and_content(tmp_path, line):
    path = write(tmp_path, "bad.data", "a\tb\t0\n%s\nc\td\t1\n" % line)
    with pytest.raises(DataError, match=r"bad\.data:2: expected .*" + re.escape(repr(line))):
        list(read_pairs(path))


def test_skip_bad_lines_counts_them(tmp_path, caplog):
    path = write(tmp_path, "bad.data", "a\tb\t0\nbroken\nc\td\t1\nx\ty\n")
    with caplog.at_level(logging.WARNING):
        assert [p[0] for p in read_pairs(path, skip_bad_lines=True)] == ["a", "c"]
    assert "bad.data: skipped 2 malformed lines" in caplog.text


def test_sentence_files_keep_empty_lines_and_detect_as_lines(tmp_path, caplog):
    path = write(tmp_path, "s.txt", "first\n\nthird with\ta tab\n")
    with caplog.at_level(logging.INFO):
        assert list(read_sentences(path)) == ["first", "", "third with\ta tab"]
    assert "s.txt: read as sentences, one per line (0 of the first 2 non-empty" in caplog.text


def test_lines_end_at_newline_only(tmp_path):
    path = write(tmp_path, "cr.txt", "a\rb\r\nc\n\rd\ne\r\r\n")
    assert list(read_sentences(path, "lines")) == ["a\rb", "c", "\rd", "e\r"]
    pairs = write(tmp_path, "cr.data", "a\rx\tb\t1\r\nc\td\t0\n")
    assert list(read_pairs(pairs)) == [("a\rx", "b", 1.0), ("c", "d", 0.0)]


def test_empty_missing_and_non_utf8_files(tmp_path):
    assert list(read_sentences(write(tmp_path, "e.txt", ""))) == []
    with pytest.raises(DataError, match="nothing.txt: no such file"):
        list(read_sentences(str(tmp_path / "nothing.txt"), "lines"))
    with pytest.raises(DataError, match=r"gbk.txt:2: not UTF-8 text \(byte 0xbd at byte 0 of"):
        list(read_sentences(write(tmp_path, "gbk.txt", "fine\n今天天气\n", "gbk"), "lines"))
    with pytest.raises(DataError, match=r"is a directory"):
        list(read_sentences(str(tmp_path), "lines"))
    with pytest.raises(ValueError, match="unknown input format 'csv'"):
        list(read_sentences(str(tmp_path / "e.txt"), "csv"))


def test_a_truncated_gzip_names_the_file_and_the_last_line_read(tmp_path):
    import gzip

    whole = gzip.compress("".join("sentence %d\n" % i for i in range(2000)).encode())
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"cut.txt.gz: truncated or corrupt compressed data after line \d+"):
        list(read_sentences(str(path), "lines"))


def test_auto_detection_holds_the_lines_it_decides_on_not_the_empty_ones_between(tmp_path):
    """Endless empty lines were held whole while auto waited for its first non-empty lines
    (``yes '' | fit -``: out of memory); each line keeps its number, empty or not."""
    import tracemalloc

    from bert_whitening.data import read_sentences

    path = tmp_path / "sparse.txt"
    path.write_text("\n\na\n\nb\n\n", encoding="utf-8")
    assert list(read_sentences(str(path), numbered=True)) == [(1, ""), (2, ""), (3, "a"), (4, ""), (5, "b"), (6, "")]
    pairs = tmp_path / "pairs.data"
    pairs.write_text("".join("x%d\ty\t1\n" % i for i in range(150)), encoding="utf-8")
    read = list(read_sentences(str(pairs), numbered=True))
    assert read[:4] == [(1, "x0"), (1, "y"), (2, "x1"), (2, "y")] and read[-1] == (150, "y") and len(read) == 300
    path.write_text("\n" * 300_000 + "a\n", encoding="utf-8")
    tracemalloc.start()
    try:
        sentences = read_sentences(str(path))
        assert next(sentences) == ""  # decided: all but the last line are held no longer
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak  # the 300,000 empty lines held took about 20 MB
    assert sum(1 for _ in sentences) == 300_000


def test_auto_detection_looks_past_a_header_and_names_the_line_that_disagrees(tmp_path, caplog):
    rows = "".join("s%d\tt%d\t%d\n" % (i, i, i % 2) for i in range(10))
    header = write(tmp_path, "header.data", "sentence1\tsentence2\tlabel\n" + rows)
    with caplog.at_level(logging.INFO):
        with pytest.raises(DataError, match=r"header.data:1: expected sentence1<TAB>sentence2"):
            list(read_sentences(header))
    assert "read as senteval_cn pairs (10 of the first 11" in caplog.text
    assert list(read_sentences(header, skip_bad_lines=True))[:4] == ["s0", "t0", "s1", "t1"]
    mostly_lines = write(tmp_path, "mixed.txt", "one\ntwo\nthree\na\tb\t1\nfour\n")
    with pytest.raises(
        DataError,
        match=r"mixed.txt:4: a sentence1<TAB>sentence2<TAB>label line "
        r"in a file whose other lines are sentences",
    ):
        list(read_sentences(mostly_lines))
    assert len(list(read_sentences(mostly_lines, "lines"))) == 5  # said explicitly: no check


def test_a_pair_line_after_the_lines_auto_looks_at_is_an_error(tmp_path):
    from bert_whitening.data import DETECT_LINES

    path = write(tmp_path, "late.txt", "".join("line %d\n" % i for i in range(DETECT_LINES + 5)) + "x\ty\t3\n")
    with pytest.raises(
        DataError,
        match=r"late.txt:%d: a sentence1<TAB>sentence2<TAB>label line "
        r"in a file read as sentences" % (DETECT_LINES + 6),
    ):
        list(read_sentences(path))


def test_standard_input_is_read_once_with_the_format_detected_on_the_same_read(monkeypatch, tmp_path):
    import io
    import os

    rows = "".join("s%d\tt%d\t%d\n" % (i, i, i % 2) for i in range(300))
    read_end, write_end = os.pipe()
    os.write(write_end, rows.encode())
    os.close(write_end)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(os.fdopen(read_end, "rb")))
    sentences = list(read_sentences("-"))
    assert len(sentences) == 600 and sentences[:2] == ["s0", "t0"] and sentences[-1] == "t299"
    with pytest.raises(DataError, match=r"standard input:1: expected sentence1"):
        read_end, write_end = os.pipe()
        os.write(write_end, b"a\tb\tx\n")
        os.close(write_end)
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(os.fdopen(read_end, "rb")))
        list(read_pairs("-"))


def test_senteval_tasks_load_present_splits_and_name_missing_ones(tmp_path, caplog):
    from bert_whitening.data import load_task

    task = tmp_path / "ATEC"
    task.mkdir()
    (task / "ATEC.valid.data").write_text("a\tb\t1\nc\td\t0\n", encoding="utf-8")
    (task / "ATEC.test.data").write_text("e\tf\t1\ng\th\t0.5\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        splits = load_task("ATEC", str(tmp_path))
    assert list(splits) == ["valid", "test"] and splits["test"] == [("e", "f", 1.0), ("g", "h", 0.5)]
    assert "ATEC: no train split; evaluating valid/test" in caplog.text
    with pytest.raises(DataError, match="BQ: no BQ.{train,valid,test}.data under"):
        load_task("BQ", str(tmp_path))
    (task / "ATEC.train.data").symlink_to(tmp_path / "moved")  # a dangling link is no missing split
    with pytest.raises(DataError, match="^%s: no such file$" % (task / "ATEC.train.data")):
        load_task("ATEC", str(tmp_path))


def test_data_dir_comes_from_the_flag_then_the_environment(monkeypatch):
    from bert_whitening.data import data_dir

    monkeypatch.delenv("BERT_WHITENING_DATA", raising=False)
    assert data_dir() == "data/senteval_cn"
    monkeypatch.setenv("BERT_WHITENING_DATA", "/env")
    assert data_dir() == "/env" and data_dir("/flag") == "/flag"


def test_english_sts_both_layouts_agree(tmp_path):
    from bert_whitening.data import load_task

    packed = load_task("STS-B-en", shared_data("senteval_cn"))
    assert {k: len(v) for k, v in packed.items()} == {"train": 5749, "valid": 1500, "test": 1379}
    csv_dir = tmp_path / "STS-B-en"
    csv_dir.mkdir()
    for name in ("sts-dev.csv", "sts-test.csv"):
        (csv_dir / name).write_bytes(open(shared_data("stsbenchmark", name), "rb").read())
    original = load_task("STS-B-en", str(tmp_path))
    assert list(original) == ["valid", "test"]
    assert original["test"] == packed["test"] and original["valid"] == packed["valid"]
    assert any('"' in a or '"' in b for a, b, _ in packed["test"])  # quotes kept as they are


def test_english_sts_malformed_line_is_named(tmp_path):
    from bert_whitening.data import load_task

    folder = tmp_path / "STS-B-en"
    folder.mkdir()
    (folder / "sts-test.csv").write_text("g\tf\t2012\t0001\t4.0\ta\tb\ng\tf\t2012\t0002\tx\ta\tb\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"sts-test.csv:2: malformed line"):
        load_task("STS-B-en", str(tmp_path))
    assert load_task("STS-B-en", str(tmp_path), skip_bad_lines=True)["test"] == [("a", "b", 4.0)]


def message(error_type, action):
    with pytest.raises(error_type) as info:
        action()
    return str(info.value)


STS_ROWS = [
    (
        "train",
        "main-captions",
        "MSRvid",
        "2012test",
        "0001",
        "5.000",
        "A man is playing a flute.",
        'A man plays the "flute".',
    ),
    ("dev", "main-forums", "answers", "2015", "0002", "0.25", "trailing space ", "b"),
    ("test", "main-news", "headlines", "2016", "0003", "3.8", "X", "ends in X"),
]
STS_EXPECTED = {
    "train": [("A man is playing a flute.", 'A man plays the "flute".', 5.0)],
    "valid": [("trailing space ", "b", 0.25)],
    "test": [("X", "ends in X", 3.8)],
}


def write_packed_sts(directory, rows, header=True):
    import gzip

    directory.mkdir(parents=True, exist_ok=True)
    lines = ["split\tgenre\tdataset\tyear\tsid\tscore\tsentence1\tsentence2"] if header else []
    lines += ["\t".join(row) for row in rows]
    with gzip.open(directory / "stsbenchmark.tsv.gz", "wb") as stream:
        stream.write("".join(line + "\r\n" for line in lines).encode("utf-8"))


def test_english_sts_packed_layout_beside_senteval_cn(tmp_path, caplog):
    from bert_whitening.data import load_task

    senteval = tmp_path / "senteval_cn"
    senteval.mkdir()
    assert message(DataError, lambda: load_task("STS-B-en", str(senteval))) == (
        "STS-B-en: no English STS benchmark under %s/STS-B-en or %s/../stsbenchmark" % (senteval, senteval)
    )
    write_packed_sts(tmp_path / "stsbenchmark", STS_ROWS)
    assert load_task("STS-B-en", str(senteval)) == STS_EXPECTED
    broken = tmp_path / "broken" / "STS-B-en"
    write_packed_sts(
        broken, STS_ROWS + [("other",) + STS_ROWS[0][1:], ("split",) + STS_ROWS[0][1:], ("", "dev") + STS_ROWS[0][2:]]
    )  # no split: not "dev"
    path = str(broken / "stsbenchmark.tsv.gz")
    assert message(DataError, lambda: load_task("STS-B-en", str(broken.parent))) == (
        "%s:5: malformed line: expected split<TAB>genre<TAB>dataset<TAB>year<TAB>sid<TAB>score<TAB>"
        "s1<TAB>s2, got %r" % (path, "\t".join(("other",) + STS_ROWS[0][1:]))
    )
    with caplog.at_level(logging.WARNING):
        assert load_task("STS-B-en", str(broken.parent), skip_bad_lines=True) == STS_EXPECTED
    assert caplog.messages == ["%s: skipped 3 malformed lines" % path]


def test_english_sts_csv_layout_reads_the_same(tmp_path):
    from bert_whitening.data import load_task

    folder = tmp_path / "STS-B-en"
    folder.mkdir()
    for split, name in (("train", "sts-train.csv"), ("dev", "sts-dev.csv"), ("test", "sts-test.csv")):
        rows = [row[1:] + ("extra", "fields") for row in STS_ROWS if row[0] == split]
        (folder / name).write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    assert load_task("STS-B-en", str(tmp_path)) == STS_EXPECTED
    (folder / "sts-dev.csv").write_text("g\tf\t2012\t1\tnone\ta\tb\n", encoding="utf-8")
    assert message(DataError, lambda: load_task("STS-B-en", str(tmp_path))) == (
        "%s:1: malformed line: expected genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>s1<TAB>s2, got %r"
        % (folder / "sts-dev.csv", "g\tf\t2012\t1\tnone\ta\tb")
    )


def test_gzip_files_custom_openers_and_line_ends(tmp_path):
    import gzip
    import io

    text = "first \t\nsecond\r\nends in X\r\n\n"
    with gzip.open(tmp_path / "s.txt.gz", "wb") as stream:
        stream.write(text.encode("utf-8"))
    expected = ["first \t", "second", "ends in X", ""]
    assert list(read_sentences(str(tmp_path / "s.txt.gz"))) == expected
    files = {"mem://s": text, "mem://p": "a b\tc d\t1\nbad\ne\tf\t0.5\n"}
    opener = lambda path: io.BytesIO(files[path].encode("utf-8"))
    assert list(read_sentences("mem://s", opener=opener)) == expected
    assert list(read_sentences("mem://p", "pairs", True, opener)) == ["a b", "c d", "e", "f"]
    assert list(read_pairs("mem://p", True, opener)) == [("a b", "c d", 1.0), ("e", "f", 0.5)]
    assert (
        message(DataError, lambda: list(read_sentences("mem://p", opener=opener)))
        == "mem://p:2: expected sentence1<TAB>sentence2<TAB>label with a finite numeric label, got 'bad'"
    )


def test_data_error_messages_in_full(tmp_path):
    long_line = "x" * 300
    path = write(tmp_path, "long.data", "a\tb\t1\n%s\n" % long_line)
    assert message(
        DataError, lambda: list(read_pairs(path))
    ) == "%s:2: expected sentence1<TAB>sentence2<TAB>label with a finite numeric label, got %r" % (path, "x" * 200)
    empty = write(tmp_path, "empty.txt", "\n\n")
    assert list(read_sentences(empty)) == ["", ""]
    missing = str(tmp_path / "missing.txt")
    assert message(DataError, lambda: list(read_sentences(missing, "lines"))) == "%s: no such file" % missing
    latin = write(tmp_path, "latin.txt", "café\n", "latin-1")
    assert (
        message(DataError, lambda: list(read_sentences(latin, "lines")))
        == "%s:1: not UTF-8 text (byte 0xe9 at byte 3 of the line)" % latin
    )
    gbk = write(tmp_path, "gbk.txt", "ok\n今天天气很好\n", "gbk")  # the usual encoding of a Chinese file not UTF-8
    assert message(DataError, lambda: list(read_sentences(gbk, "lines"))) == (
        "%s:2: not UTF-8 text (byte 0xbd at byte 0 of the line); it reads as GBK/GB18030 Chinese: "
        "convert it first, e.g. iconv -f GB18030 -t UTF-8" % gbk
    )
    assert (
        message(DataError, lambda: list(read_sentences(str(tmp_path), "lines")))
        == "%s: is a directory, not a file" % tmp_path
    )


def test_senteval_task_skips_bad_lines_and_names_what_is_missing(tmp_path, caplog):
    from bert_whitening.data import load_task

    (tmp_path / "PAWSX").mkdir()
    (tmp_path / "PAWSX" / "PAWSX.test.data").write_text("a\tb\t1\nbroken\n", encoding="utf-8")
    (tmp_path / "PAWSX" / "PAWSX.dev.data").write_text("c\td\t1\n", encoding="utf-8")  # was passed over in silence
    with caplog.at_level(logging.INFO, logger="bert_whitening.data"):
        assert load_task("PAWSX", str(tmp_path), skip_bad_lines=True) == {"test": [("a", "b", 1.0)]}
    assert caplog.messages[-2:] == [
        "PAWSX: PAWSX.dev.data not read: the splits are train/valid/test",
        "PAWSX: no train/valid split; evaluating test",
    ]
    with pytest.raises(DataError, match="PAWSX.test.data:2: expected"):
        load_task("PAWSX", str(tmp_path))
    assert message(
        DataError, lambda: load_task("BQ", str(tmp_path))
    ) == "BQ: no BQ.{train,valid,test}.data under %s (tasks there: PAWSX; a pair file is taken as a task too)" % (
        tmp_path / "BQ"
    )


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_text_with_a_utf16_or_utf32_byte_order_mark_is_named_as_such(tmp_path, encoding):
    path = tmp_path / "bom.txt"
    text = "good weather\nhello\n"  # "utf-16" and "utf-32" write their mark, the -be codec does not
    path.write_bytes(("\ufeff" + text if encoding.endswith("-be") else text).encode(encoding))
    with pytest.raises(
        DataError, match=r"^.*bom.txt:1: UTF-16 or UTF-32 text \(it starts with their byte-order mark\)"
    ):
        list(read_sentences(str(path), "lines"))


def test_utf16_without_a_byte_order_mark_is_refused_not_read_as_extra_rows(tmp_path):
    path = tmp_path / "utf16.txt"
    path.write_bytes("good weather\nhello\n".encode("utf-16-le"))  # no BOM: NUL after each ASCII byte
    with pytest.raises(DataError, match=r"utf16.txt:1: a NUL byte at byte \d+ of the line: not UTF-8"):
        list(read_sentences(str(path), "lines"))


def test_a_utf8_byte_order_mark_is_dropped_from_the_first_line_only(tmp_path):
    """Line 1's mark is the file's; one further down is a character of that line."""
    path = write(tmp_path, "bom.txt", "\ufeffone\n\ufefftwo\n")
    assert list(read_sentences(path, "lines")) == ["one", "\ufefftwo"]
    pairs = write(tmp_path, "bom.data", "\ufeffa\tb\t1\n")
    assert list(read_pairs(pairs)) == [("a", "b", 1.0)]


def test_refusals_of_bytes_that_are_not_utf8_text_say_where_and_hint_only_at_chinese(tmp_path):
    nul = write(tmp_path, "nul.txt", "fine\nab\0c\n")
    assert message(DataError, lambda: list(read_sentences(nul, "lines"))) == (
        "%s:2: a NUL byte at byte 2 of the line: not UTF-8 text (UTF-16 without a byte-order mark?)" % nul
    )
    greek = write(tmp_path, "greek.txt", "\u03b1\u03b2\u03b3\n", "gbk")  # GB18030 text, not Chinese: no hint
    assert message(DataError, lambda: list(read_sentences(greek, "lines"))) == (
        "%s:1: not UTF-8 text (byte 0xa6 at byte 0 of the line)" % greek
    )


def test_auto_detection_reads_half_pair_lines_as_pairs_and_decides_on_the_hundredth_line(tmp_path, caplog):
    from bert_whitening.data import DETECT_LINES

    tie = write(tmp_path, "tie.data", "a\tb\t1\nnot a pair\n")
    with caplog.at_level(logging.INFO):
        assert message(DataError, lambda: list(read_sentences(tie))) == "%s:2: %s, got 'not a pair'" % (
            tie,
            "expected sentence1<TAB>sentence2<TAB>label with a finite numeric label",
        )
    assert "tie.data: read as senteval_cn pairs (1 of the first 2 non-empty lines are pair lines)" in caplog.text
    sentences = ["line %d\n" % i for i in range(DETECT_LINES - 1)]
    last = write(tmp_path, "last.txt", "".join(sentences) + "\nx\ty\t3\n")  # the pair: non-empty line 100
    assert message(DataError, lambda: list(read_sentences(last))) == (
        "%s:%d: a sentence1<TAB>sentence2<TAB>label line in a file whose other lines are sentences "
        "(1 of the first %d non-empty lines are pairs); give --format lines or --format pairs"
        % (last, DETECT_LINES + 1, DETECT_LINES)
    )


def test_an_english_sts_line_without_its_second_sentence_is_a_malformed_line(tmp_path):
    from bert_whitening.data import load_task

    folder = tmp_path / "STS-B-en"
    folder.mkdir()
    (folder / "sts-test.csv").write_text("g\tf\t2012\t0001\t4.0\ta\tb\ng\tf\t2012\t0002\t3.0\ta\n", encoding="utf-8")
    assert message(DataError, lambda: load_task("STS-B-en", str(tmp_path))) == (
        "%s:2: malformed line: expected genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>s1<TAB>s2, got %r"
        % (folder / "sts-test.csv", "g\tf\t2012\t0002\t3.0\ta")
    )


def test_pairs_with_one_distinct_label_are_refused_saying_what_the_file_is_for():
    from bert_whitening.data import check_labels

    pairs = [("a", "b", 2.0), ("c", "d", 2.0), ("e", "f", 2.0)]
    assert message(DataError, lambda: check_labels(pairs, "t.data", "train")) == (
        "t.data:1-3: every label is 2, one distinct label: the train file has nothing to rank"
    )
    assert message(DataError, lambda: check_labels(pairs, "v.data", "valid")) == (
        "v.data:1-3: every label is 2, one distinct label: the valid file has nothing to correlate with"
    )
    assert message(DataError, lambda: check_labels([], "e.data", "train")) == "e.data: the train file holds no pairs"
    check_labels(pairs + [("g", "h", 2.5)], "t.data", "train")


def test_a_task_folder_wins_over_a_file_of_the_same_name_in_the_working_directory(tmp_path, monkeypatch):
    from bert_whitening.data import load_task, split_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ATEC").write_text("x\ty\t1\nz\tw\t0\n", encoding="utf-8")  # a pair file named as the task
    (tmp_path / "data" / "ATEC").mkdir(parents=True)
    (tmp_path / "data" / "ATEC" / "ATEC.test.data").write_text("a\tb\t1\nc\td\t0\n", encoding="utf-8")
    assert load_task("ATEC", "data") == {"test": [("a", "b", 1.0), ("c", "d", 0.0)]}
    assert split_file("data", "ATEC", "test") == os.path.join("data", "ATEC", "ATEC.test.data")
    assert load_task("ATEC", "elsewhere") == {"test": [("x", "y", 1.0), ("z", "w", 0.0)]}  # no folder: the file
    assert split_file("elsewhere", "ATEC", "test") == "ATEC"
    assert split_file("elsewhere", "ATEC", "valid") == "ATEC (a pair file: its test split alone)"


def test_the_files_of_tasks_are_their_folders_and_the_english_benchmark_beside_the_data(tmp_path):
    from bert_whitening.data import task_files

    data = tmp_path / "senteval_cn"
    (data / "ATEC").mkdir(parents=True)
    (data / "ATEC" / "ATEC.test.data").write_text("a\tb\t1\n", encoding="utf-8")
    (data / "report.json").write_text("{}", encoding="utf-8")  # beside the tasks: no input
    (tmp_path / "stsbenchmark").mkdir()
    (tmp_path / "stsbenchmark" / "sts-test.csv").write_text("", encoding="utf-8")
    expected = [
        str(data / "ATEC" / "ATEC.test.data"),
        os.path.join(str(data), os.pardir, "stsbenchmark", "sts-test.csv"),
    ]
    assert task_files(str(data), ["ATEC", "STS-B-en"]) == expected


def test_the_tasks_a_refusal_lists_are_sorted(tmp_path):
    from bert_whitening.data import load_task

    names = ["T%02d" % i for i in range(12)]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / ("%s.valid.data" % name)).write_text("a\tb\t1\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()  # no split: no task
    assert message(DataError, lambda: load_task("BQ", str(tmp_path))) == (
        "BQ: no BQ.{train,valid,test}.data under %s (tasks there: %s; a pair file is taken as a task too)"
        % (tmp_path / "BQ", ", ".join(names))
    )


def test_a_stream_named_twice_is_refused_and_a_file_named_twice_is_not(tmp_path):
    from bert_whitening.data import check_read_once

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(fifo)
    (tmp_path / "file.txt").write_text("a\n", encoding="utf-8")
    assert message(DataError, lambda: check_read_once([str(fifo), "x", str(tmp_path / "link")])) == (
        "cannot read %s twice (as %s and %s): standard input, a pipe or a FIFO can be read only once"
        % (tmp_path / "link", fifo, tmp_path / "link")
    )
    assert message(DataError, lambda: check_read_once(["/dev/null", "/dev/null"])).startswith(
        "cannot read /dev/null twice (as /dev/null and /dev/null)"  # a character device
    )
    check_read_once([str(tmp_path / "file.txt")] * 2)


def test_inputs_that_are_no_readable_files_are_refused_before_any_work(tmp_path):
    from bert_whitening.data import check_readable

    assert message(DataError, lambda: check_readable([str(tmp_path)])) == "%s: is a directory, not a file" % tmp_path
    missing = str(tmp_path / "none")
    assert message(DataError, lambda: check_readable([missing])) == "%s: no such file" % missing


def test_a_read_that_fails_names_the_last_line_read(tmp_path):
    import errno
    import io

    class Failing(io.BytesIO):
        def readline(self, size=-1):
            line = super().readline(size)
            if not line:
                raise OSError(errno.EIO, "Input/output error")
            return line

    opener = lambda path: Failing(b"a\nb\nc\n")
    assert message(DataError, lambda: list(read_sentences("mem://s", "lines", opener=opener))) == (
        "mem://s: cannot read after line 3 (Input/output error)"
    )
