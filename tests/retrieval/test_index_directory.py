"""An index directory is trusted only as far as it checks out: every file verified before FAISS
reads it, nothing outside it read at search time, one-line refusals for what was edited."""

import contextlib
import hashlib
import json
import os
import shutil
import struct

import numpy as np
import pytest

from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.bounded import FLOW_FILE_BYTES, LINE_BYTES, MODEL_SIZES, whitening_file_bytes
from bert_whitening.retrieval.index_directory import (
    FLOW_FILE,
    INDEX_FILE,
    KEYS_FILE,
    RECORD_FILE,
    ROW_BYTES,
    TEXTS_FILE,
    WHITENING_FILE,
    IndexDirectory,
    IndexOptions,
    IndexWriter,
)
from bert_whitening.retrieval.search import _add_keyed, numbered_lines

from helpers import RECORD, unit


def write_index(directory, seed=0, rows=12, dim=6, texts=True, hnsw_m=0):
    vectors = unit(np.random.default_rng(seed).normal(size=(rows, dim))).astype(np.float32)
    record = dict(RECORD, model=dict(RECORD["model"], hidden_size=dim))
    with IndexWriter(str(directory), record, dim, IndexOptions(hnsw_m=hnsw_m)) as writer:
        writer.add(
            vectors,
            [("/corpus/%d.txt" % seed, i + 1) for i in range(rows)],
            ["text %d" % i for i in range(rows)] if texts else None,
        )
    return vectors


@pytest.fixture
def index(tmp_path):
    write_index(tmp_path / "index")
    return tmp_path / "index"


def refused(directory, *fragments):
    with pytest.raises(ValueError) as raised:
        IndexDirectory(str(directory)).rows({0})
    message = str(raised.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    return message


def test_the_texts_are_read_from_the_index_not_from_the_corpus_files(index):
    opened = IndexDirectory(str(index))
    assert opened.rows({0, 11}) == {0: ("/corpus/0.txt", 1, "text 0"), 11: ("/corpus/0.txt", 12, "text 11")}
    scores, ids = opened.search(opened.vectors()[:2], 500_000_000)  # clamped to the 12 rows
    assert ids.shape == (2, 12) and ids[:, 0].tolist() == [0, 1]


@pytest.mark.parametrize("name", [INDEX_FILE, KEYS_FILE, TEXTS_FILE])
def test_an_edited_file_is_refused_before_it_is_used(index, name):
    path = index / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    refused(index, name, "sha256 differs")


def test_an_index_faiss_from_another_index_of_the_same_dimension_is_refused(index, tmp_path):
    write_index(tmp_path / "other", seed=1)
    shutil.copy(tmp_path / "other" / INDEX_FILE, index / INDEX_FILE)
    refused(index, INDEX_FILE, "not the file this index was built with")


@pytest.mark.parametrize("kind", ["fifo", "device", "missing"])
def test_a_file_that_is_not_a_regular_file_is_refused_without_reading_it(index, kind):
    os.unlink(index / INDEX_FILE)
    if kind == "fifo":
        os.mkfifo(index / INDEX_FILE)  # reading it would block for ever
    elif kind == "device":
        os.symlink("/dev/zero", index / INDEX_FILE)  # reading it would never end
    refused(index, INDEX_FILE, "no index.faiss" if kind == "missing" else "not a regular file")


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda m: "{not json", "is not valid JSON"),
        (lambda m: json.dumps([1, 2]), "expected a JSON object, got list"),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "count"}), "has no 'count'"),
        (lambda m: json.dumps(dict(m, dim="6")), "'dim' is '6'"),
        (lambda m: json.dumps(dict(m, pooling=3)), "'pooling' is 3"),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "format_version"}), "earlier version"),
        (lambda m: json.dumps(dict(m, format_version=3)), "index format version 3; this version reads 2"),
        (lambda m: json.dumps(dict(m, count=True)), "'count' is True, expected int"),
        (lambda m: json.dumps(dict(m, count=0)), "count 0, dim 6: an index holds at least one vector"),
        (lambda m: json.dumps(dict(m, dim=0)), "count 12, dim 0: an index holds at least one vector"),
        (lambda m: json.dumps(dict(m, files={})), "lists files"),
        (
            lambda m: json.dumps(dict(m, files=dict(m["files"], **{"index.json": "0" * 64}))),
            "lists files ['index.faiss', 'index.json', 'keys.tsv', 'texts.jsonl'], expected",
        ),
        (lambda m: json.dumps(dict(m, index="bogus")), "'index' is 'bogus', expected one of flat, hnsw"),
        (lambda m: json.dumps(dict(m, hnsw_m=8)), "'hnsw_m' is 8, expected null for a flat index"),
        (lambda m: json.dumps(dict(m, index="hnsw")), "'hnsw_m' is None, expected a positive integer"),
        (lambda m: json.dumps(dict(m, index="hnsw", hnsw_m=0)), "'hnsw_m' is 0, expected a positive integer"),
        (lambda m: json.dumps(dict(m, normalize=False)), "'normalize' is False, expected true"),
        (lambda m: json.dumps(dict(m, n_components=3)), "'n_components' is 3 without a whitening"),
        (lambda m: json.dumps(dict(m, dim=5)), "'dim' is 5, but its encoder gives vectors of dimension 6"),
        (
            lambda m: json.dumps(dict(m, dim=8193, model=dict(m["model"], hidden_size=8193))),
            "the model identity's 'hidden_size' is 8193, more than any model has (%d)" % MODEL_SIZES["hidden_size"],
        ),
        (  # the largest hidden size passes that check, to the one of the index's layout
            lambda m: json.dumps(
                dict(m, dim=8192, bytes_per_vector=4 * 8192, model=dict(m["model"], hidden_size=8192))
            ),
            "index.faiss holds 12 vectors of dimension 6; index.json says 12 of 8192",
        ),
    ],
)
def test_a_malformed_index_json_is_one_line(index, edit, fragment):
    path = index / RECORD_FILE
    path.write_text(edit(json.loads(path.read_text(encoding="utf-8"))), encoding="utf-8")
    refused(index, fragment)


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("dim", 5, "holds 12 vectors of dimension 6; index.json says 12 of 5"),
        ("count", 13, "holds 12 vectors of dimension 6; index.json says 13 of 6"),
    ],
)
def test_index_json_disagreeing_with_the_index_is_refused(index, key, value, fragment):
    path = index / RECORD_FILE
    metadata = dict(json.loads(path.read_text(encoding="utf-8")), **{key: value})
    metadata["model"]["hidden_size"] = metadata["dim"]  # a record consistent in itself
    metadata["bytes_per_vector"] = 4 * metadata["dim"]
    path.write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=fragment):
        IndexDirectory(str(index)).index  # noqa: B018  reading it is the check


@pytest.mark.parametrize("rows, hnsw_m", [(1, 2), (300, 2), (40, 32)])
def test_an_hnsw_index_opens_with_its_vectors(tmp_path, rows, hnsw_m):
    """Its graph (several levels with M = 2 on 300 rows) passes the layout check as written."""
    vectors = write_index(tmp_path / "index", rows=rows, hnsw_m=hnsw_m)
    opened = IndexDirectory(str(tmp_path / "index"))
    assert (opened.metadata["index"], opened.metadata["hnsw_m"]) == ("hnsw", hnsw_m)
    np.testing.assert_array_equal(opened.vectors(), vectors)
    assert opened.search(vectors[:1], 1)[1].tolist() == [[0]]


def forged(directory, edit, name=INDEX_FILE, **entries):
    """The file ``name`` rewritten by ``edit`` (of its bytes), with its checksum and ``entries``
    in index.json to match: what someone who can write index.json can do."""
    path = directory / name
    path.write_bytes(edit(path.read_bytes()))
    metadata = json.loads((directory / RECORD_FILE).read_text(encoding="utf-8"))
    metadata.update(entries)
    metadata["files"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (directory / RECORD_FILE).write_text(json.dumps(metadata), encoding="utf-8")


def at(offset, fields, *values):
    """An edit writing ``values`` packed as ``fields`` at ``offset``."""
    packed = struct.pack(fields, *values)
    return lambda data: data[:offset] + packed + data[offset + len(packed) :]


#: Where FAISS writes an index's row count and its metric, and where its header ends (a flat
#: index's vectors' length, an HNSW one's arrays).
NTOTAL, METRIC, HEADER_END = 8, 33, 37


def at_hnsw_array(number, length):
    """An edit of an HNSW index's array ``number`` (0: level probabilities, 1: neighbours per
    level, 2: levels, 3: offsets, 4: neighbours) to claim ``length`` entries."""

    def edit(data):
        offset = HEADER_END
        for itemsize in (8, 4, 4, 8, 4)[:number]:
            offset += 8 + itemsize * struct.unpack_from("<Q", data, offset)[0]
        return at(offset, "<Q", length)(data)

    return edit


@pytest.mark.parametrize(
    "hnsw_m, edit, entries, fragment",
    [
        (  # 2^28 vectors claimed in a 333-byte file, and by index.json
            0,
            lambda data: at(NTOTAL, "<q", 1 << 28)(at(HEADER_END, "<Q", 6 << 28)(data)),
            {"count": 1 << 28},
            "claims 1610612736 vector components (6442450944 bytes) with 288 bytes left in the file",
        ),
        (0, lambda data: data[:40], {}, "ends at byte 40, before the index it should hold"),
        (0, lambda data: data + b"more", {}, "has 4 bytes after the index it holds"),
        (0, at(METRIC, "<i", 1), {}, "holds an index of FAISS metric 1, not inner product"),
        (0, lambda data: data, {"index": "hnsw", "hnsw_m": 4}, "of kind b'IxFI' where b'IHNf' is expected"),
        (4, lambda data: data, {"index": "flat", "hnsw_m": None}, "of kind b'IHNf' where b'IxFI' is expected"),
        (4, at_hnsw_array(2, 1 << 40), {}, "holds 1099511627776 levels where 12 are expected"),
        (4, at_hnsw_array(4, 1 << 36), {}, "claims 68719476736 neighbours (274877906944 bytes) with"),
        # 216 of 116 neighbours: fewer entries than bytes left, more bytes (4 an entry) than left
        (4, at_hnsw_array(4, 216), {}, "claims 216 neighbours (864 bytes) with 817 bytes left in the file"),
    ],
)
def test_a_forged_index_faiss_is_refused_at_opening_before_faiss_reads_it(
    tmp_path, monkeypatch, hnsw_m, edit, entries, fragment
):
    """FAISS allocates what a length in the file claims before reading it: a small forged file
    once made it allocate gigabytes before it found the file short. The keys and texts, whose
    line index is kept for as many rows as the checked index.faiss holds, are not read yet."""
    import faiss

    from bert_whitening.retrieval import index_directory

    write_index(tmp_path / "index", hnsw_m=hnsw_m)
    forged(tmp_path / "index", edit, **entries)
    monkeypatch.setattr(faiss, "read_index", lambda *_: pytest.fail("FAISS read a forged index.faiss"))
    opened = []
    checked_file = index_directory.CheckedFile
    monkeypatch.setattr(index_directory, "CheckedFile", lambda *args: opened.append(args[1]) or checked_file(*args))
    with pytest.raises(ValueError) as raised:
        IndexDirectory(str(tmp_path / "index")).vectors()
    assert str(raised.value).startswith("%s: index.faiss " % (tmp_path / "index"))
    assert fragment in str(raised.value) and "\n" not in str(raised.value)
    assert opened == [INDEX_FILE]


@pytest.mark.parametrize("name", [KEYS_FILE, TEXTS_FILE])
@pytest.mark.parametrize(
    "edit, rows",
    [
        (lambda data: data[: data.rindex(b"\n", 0, -1) + 1], 11),  # the last row dropped
        (lambda data: data + data.split(b"\n", 1)[0] + b"\n", 13),  # the first row again at the end
    ],
)
def test_keys_or_texts_of_another_row_count_are_refused_at_opening_naming_the_file(index, name, edit, rows):
    forged(index, edit, name)
    with pytest.raises(ValueError, match="^%s: %s holds %d rows; index.json says 12$" % (index, name, rows)):
        IndexDirectory(str(index))


@pytest.mark.parametrize(
    "name, line, fragment",
    [
        (KEYS_FILE, b"/corpus/0.txt 1\n", "keys.tsv line 1: expected file<TAB>line"),
        (TEXTS_FILE, b"{not json\n", "texts.jsonl line 1: expected a JSON string or null"),
        (TEXTS_FILE, b"[1]\n", "texts.jsonl line 1: expected a JSON string or null"),
    ],
)
def test_a_malformed_row_names_its_file_and_line(index, name, line, fragment):
    forged(index, lambda data: line + data.split(b"\n", 1)[1], name)
    message = refused(index, fragment)
    assert message == "%s: %s" % (index, fragment)


@pytest.mark.parametrize(
    "name, row", [(KEYS_FILE, lambda n: b"f" * (n - 2) + b"\t1"), (TEXTS_FILE, lambda n: b'"%s"' % (b"t" * (n - 2)))]
)
@pytest.mark.parametrize("beyond", [0, 1], ids=["at the limit", "beyond it"])
def test_a_row_is_read_up_to_the_longest_an_index_holds_never_whole(index, name, row, beyond):
    """A first line of texts.jsonl of three sparse gigabytes was read whole (MemoryError)."""
    forged(index, lambda data: row(ROW_BYTES + beyond) + b"\n" + data.split(b"\n", 1)[1], name)
    if beyond:
        message = refused(index)
        assert message == "%s: %s line 1 is longer than %d bytes, more than an index row holds" % (
            index,
            name,
            ROW_BYTES,
        )
    else:
        file, line, text = IndexDirectory(str(index)).rows({0})[0]
        assert (file, line, text) == (
            ("f" * (ROW_BYTES - 2), 1, "text 0") if name == KEYS_FILE else ("/corpus/0.txt", 1, "t" * (ROW_BYTES - 2))
        )


@pytest.mark.parametrize("beyond", [0, 1], ids=["at the limit", "beyond it"])
def test_the_writer_writes_no_row_longer_than_an_index_reads(tmp_path, beyond):
    """An input line's text at its longest as JSON (control characters, six bytes each) is the
    longest row; a longer text (from Python, not a file), by one byte, would make an index no
    search reads."""
    text = "\x01" * LINE_BYTES + "a" * beyond
    record = dict(RECORD, model=dict(RECORD["model"], hidden_size=2))
    with pytest.raises(ValueError) if beyond else contextlib.nullcontext() as raised:
        with IndexWriter(str(tmp_path / "index"), record, 2) as writer:
            writer.add(unit([[1, 0]]), [("/corpus.txt", 7)], [text])
    if beyond:
        assert str(
            raised.value
        ) == "/corpus.txt:7: its texts.jsonl row would take %d bytes, more than an index reads (%d)" % (
            ROW_BYTES + 1,
            ROW_BYTES,
        )
        assert os.listdir(tmp_path) == []
    else:
        assert IndexDirectory(str(tmp_path / "index")).rows({0})[0] == ("/corpus.txt", 7, text)


@pytest.mark.parametrize(
    "name, entries, holder, limit",
    [
        (
            WHITENING_FILE,
            {"whitening": {"sha256": "0" * 64}, "n_components": 6},
            "a whitening of dimension 6",
            whitening_file_bytes(6),
        ),
        (FLOW_FILE, {"flow": {"sha256": "0" * 64}}, "a flow", FLOW_FILE_BYTES),
    ],
)
def test_a_whitening_or_flow_larger_than_the_index_can_hold_is_refused_at_opening(index, name, entries, holder, limit):
    """They are read whole (their sha256 checked on the bytes parsed): a whitening.npz behind
    three sparse gigabytes was (MemoryError). Refused before it is hashed: the sha256 is not
    even looked at."""
    with open(index / name, "wb") as stream:
        stream.truncate(limit + 1)  # sparse
    metadata = dict(json.loads((index / RECORD_FILE).read_text(encoding="utf-8")), **entries)
    metadata["files"][name] = "0" * 64
    (index / RECORD_FILE).write_text(json.dumps(metadata), encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        IndexDirectory(str(index))
    assert str(raised.value) == "%s: %s holds %d bytes, more than %s can (%d)" % (index, name, limit + 1, holder, limit)


def test_a_whitening_of_the_largest_size_its_dimension_allows_is_read(tmp_path):
    """The bound is the size itself: a file of exactly that many bytes (its zip behind zeros,
    which zip readers skip) is read whole and loads."""
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    whitening = fit_whitening(WhiteningStats().update(np.random.default_rng(0).normal(size=(40, 6))))
    record = dict(RECORD, whitening={"sha256": "0" * 64}, n_components=6)
    with IndexWriter(str(tmp_path / "index"), record, 6, whitening=whitening) as writer:
        writer.add(unit(np.eye(6)).astype(np.float32), [("/corpus.txt", i + 1) for i in range(6)])
    forged(tmp_path / "index", lambda data: bytes(whitening_file_bytes(6) - len(data)) + data, WHITENING_FILE)
    assert os.path.getsize(tmp_path / "index" / WHITENING_FILE) == whitening_file_bytes(6)
    np.testing.assert_array_equal(IndexDirectory(str(tmp_path / "index")).whitening().kernel, whitening.kernel)


def test_keys_of_another_count_than_the_vectors_are_refused(tmp_path):
    vectors = unit(np.ones((3, 6))).astype(np.float32)
    with pytest.raises(ValueError, match="^2 keys for 3 vectors$"):
        with IndexWriter(str(tmp_path / "index"), RECORD, 6) as writer:
            writer.add(vectors, [("c.txt", 1), ("c.txt", 2)])
    assert os.listdir(tmp_path) == []


def test_a_file_name_with_a_line_end_or_a_tab_is_one_key_row(tmp_path):
    vectors = unit(np.random.default_rng(7).normal(size=(2, 6))).astype(np.float32)
    with IndexWriter(str(tmp_path / "index"), RECORD, 6) as writer:
        writer.add(vectors, [("/corpus/a\nb.txt", 1), ("/corpus/c\td.txt", 2)], ["one", "two"])
    rows = IndexDirectory(str(tmp_path / "index")).rows({0, 1})
    assert rows == {0: ("/corpus/a\\nb.txt", 1, "one"), 1: ("/corpus/c\\td.txt", 2, "two")}


def test_an_empty_index_is_refused_naming_its_input(tmp_path):
    with pytest.raises(ValueError, match="corpus.txt: no vectors to index"):
        with IndexWriter(str(tmp_path / "index"), RECORD, 6, source="corpus.txt"):
            pass
    assert os.listdir(tmp_path) == []


def test_a_file_name_that_is_not_utf8_is_recorded_as_text(tmp_path):
    name = os.fsdecode(b"/corpus/caf\xe9.txt")  # as Python gives an undecodable name
    with IndexWriter(str(tmp_path / "index"), dict(RECORD, model=dict(RECORD["model"], hidden_size=2)), 2) as writer:
        writer.add(unit([[1, 0], [0, 1]]), [(name, 1), (name, 2)], ["a", "b"])
    assert IndexDirectory(str(tmp_path / "index")).rows({1}) == {1: ("/corpus/caf\\xe9.txt", 2, "b")}


@pytest.mark.parametrize("replaced", ["directory", INDEX_FILE, KEYS_FILE, TEXTS_FILE])
def test_an_index_renamed_over_the_opened_one_changes_nothing_it_reads(index, tmp_path, replaced):
    """Another index of the same shape renamed into place (the whole directory, or one file)
    after the checksums were checked: what is read is still the checked index, not a mix."""
    vectors = IndexDirectory(str(index)).vectors()
    write_index(tmp_path / "other", seed=1)
    opened = IndexDirectory(str(index))
    if replaced == "directory":
        os.rename(index, tmp_path / "retired")
        os.rename(tmp_path / "other", index)
    else:
        os.rename(tmp_path / "other" / replaced, index / replaced)
    np.testing.assert_array_equal(opened.vectors(), vectors)
    assert opened.rows({0, 11}) == {0: ("/corpus/0.txt", 1, "text 0"), 11: ("/corpus/0.txt", 12, "text 11")}


@pytest.mark.parametrize("name", [INDEX_FILE, KEYS_FILE, TEXTS_FILE])
def test_a_file_written_over_in_place_after_the_check_is_refused_when_read(index, name):
    opened = IndexDirectory(str(index))
    with open(index / name, "r+b") as stream:  # the same file, one byte changed
        data = bytearray(stream.read())
        data[len(data) // 2] ^= 0x01
        stream.seek(0)
        stream.write(data)
    with pytest.raises(ValueError, match="%s: %s changed after it was checked against index.json" % (index, name)):
        opened.vectors() if name == INDEX_FILE else opened.rows({0})


def test_the_whitening_is_read_from_the_checked_bytes(tmp_path):
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    fitted = [
        fit_whitening(WhiteningStats().update(np.random.default_rng(seed).normal(size=(40, 6)))) for seed in (0, 1)
    ]
    record = dict(RECORD, whitening={"sha256": "0" * 64}, n_components=6)
    for directory, whitening in zip(("index", "other"), fitted, strict=True):
        with IndexWriter(str(tmp_path / directory), record, 6, whitening=whitening) as writer:
            writer.add(unit(np.eye(6)).astype(np.float32), [("/corpus.txt", i + 1) for i in range(6)])
    opened = IndexDirectory(str(tmp_path / "index"))
    os.rename(tmp_path / "other" / "whitening.npz", tmp_path / "index" / "whitening.npz")
    np.testing.assert_array_equal(opened.whitening().kernel, fitted[0].kernel)


def test_a_row_broken_in_place_after_the_check_is_refused_as_changed_not_as_malformed(index):
    opened = IndexDirectory(str(index))
    with open(index / KEYS_FILE, "r+b") as stream:  # the first row's tab becomes a space
        data = stream.read().replace(b"\t", b" ", 1)
        stream.seek(0)
        stream.write(data)
    with pytest.raises(ValueError, match="keys.tsv changed after it was checked"):
        opened.rows({0})


def hnsw_entry(number, entry, itemsize, fields, value):
    """An edit writing ``value`` packed as ``fields`` over entry ``entry`` of an HNSW index's
    array ``number`` (as `at_hnsw_array` counts them; 5: the scalars after the arrays)."""

    def edit(data):
        offset = HEADER_END
        for size in (8, 4, 4, 8, 4)[:number]:
            offset += 8 + size * struct.unpack_from("<Q", data, offset)[0]
        start = offset + (8 if number < 5 else 0)
        return at(start + entry * itemsize, fields, value)(data)

    return edit


@pytest.mark.parametrize(
    "edit, entries, fragment",
    [
        (hnsw_entry(4, 0, 4, "<i", 10**6), {}, "FAISS cannot read index.faiss (HNSW neighbors[0] = 1000000 out of"),
        (hnsw_entry(4, 3, 4, "<i", -2), {}, "FAISS cannot read index.faiss (HNSW neighbors[3] = -2 out of range"),
        (hnsw_entry(3, 1, 8, "<Q", 9), {}, "FAISS cannot read index.faiss (HNSW offsets not increasing"),
        (hnsw_entry(5, 0, 4, "<i", 12), {}, "FAISS cannot read index.faiss (HNSW entry_point 12 out of range"),
        (
            hnsw_entry(5, 3, 4, "<i", 2 * 10**9),
            {},
            "index.faiss holds an HNSW graph of efConstruction 40 and efSearch 2000000000,",
        ),
        (
            hnsw_entry(5, 3, 4, "<i", -1),
            {},
            "index.faiss holds an HNSW graph of efConstruction 40 and efSearch -1, where",
        ),
        (
            hnsw_entry(5, 2, 4, "<i", 41),
            {},
            "index.faiss holds an HNSW graph of efConstruction 41 and efSearch 64, where",
        ),
        (lambda data: data, {"hnsw_m": 8}, "index.faiss holds an HNSW graph of 8/4/4 neighbours on its levels, not"),
        (  # the top level's count alone (entry 15 of 16) not M 4's 64
            hnsw_entry(1, 15, 4, "<i", 68),
            {},
            "index.faiss holds an HNSW graph of 8/4/4 neighbours on its levels, not those of M 4",
        ),
        (lambda data: data, {"hnsw_m": 2}, "index.faiss holds an HNSW graph of 8/4/4 neighbours on its levels, not"),
    ],
)
def test_a_forged_hnsw_graph_is_refused_before_it_is_searched(tmp_path, edit, entries, fragment):
    """FAISS trusts a graph's offsets and neighbour ids when it searches (an id out of range would
    read outside the index); it refuses them as it reads them, in one line here, and what
    index.json records must be what the file holds, its M too. efSearch sizes what each search
    allocates (2e9: out of memory; -1: fewer hits than asked), so it must be the one written."""
    write_index(tmp_path / "index", hnsw_m=4)
    forged(tmp_path / "index", edit, **entries)
    with pytest.raises(ValueError) as raised:
        IndexDirectory(str(tmp_path / "index")).search(np.ones((1, 6), np.float32), 3)
    assert str(raised.value).startswith("%s: %s" % (tmp_path / "index", fragment))
    assert "\n" not in str(raised.value) and "cpp" not in str(raised.value)


@pytest.mark.parametrize("chunk", [1, 3, 40, 1 << 20])
def test_headers_changed_after_the_layout_check_are_refused_before_faiss_sees_them(tmp_path, chunk):
    """The layout is checked at opening; a file written over in place before FAISS reads it must
    not have FAISS allocate what its new lengths claim: every checked byte is compared as FAISS
    is handed it, however its reads are cut."""
    import io

    from bert_whitening.retrieval.faiss_indexes import check_index_layout, read_as_checked

    write_index(tmp_path / "index", hnsw_m=4)
    data = (tmp_path / "index" / INDEX_FILE).read_bytes()
    checked = check_index_layout(lambda offset, length: data[offset : offset + length], len(data), "hnsw", 12, 6)

    def handed(content):
        read = read_as_checked(io.BytesIO(content).read, checked)
        return b"".join(iter(lambda: read(chunk), b""))

    assert handed(data) == data
    for forgery in (at_hnsw_array(4, 1 << 36), at(NTOTAL, "<q", 13), hnsw_entry(5, 0, 4, "<i", 3)):
        changed = forgery(data)
        first = next(i for i in range(len(data)) if data[i] != changed[i])
        with pytest.raises(ValueError, match="^changed at byte %d after it was checked" % first):
            handed(changed)
    assert handed(hnsw_entry(4, 0, 4, "<i", 7)(data))  # a neighbour id is content, not layout
    for offset, header in checked:  # the first and the last byte of every header and length
        for byte in {offset, offset + len(header) - 1}:
            changed = data[:byte] + bytes([data[byte] ^ 0xFF]) + data[byte + 1 :]
            with pytest.raises(ValueError, match="^changed at byte %d after it was checked" % byte):
                handed(changed)


def test_an_index_faiss_written_over_after_opening_is_refused_before_faiss_reads_the_new_length(index):
    """Its sha256 refuses it once read in full (the message the user sees); before that, the new
    length never reached FAISS (the refusal it interrupted)."""
    opened = IndexDirectory(str(index))
    with open(index / INDEX_FILE, "r+b") as stream:
        stream.seek(HEADER_END)
        stream.write(struct.pack("<Q", 1 << 36))
    with pytest.raises(ValueError, match="index.faiss changed after it was checked") as raised:
        opened.vectors()
    assert "index.faiss changed at byte %d after it was checked" % HEADER_END in str(raised.value.__context__)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"hnsw_m": 1}, "hnsw_m must be 0 (exact) or an integer 2..512, got 1"),
        ({"hnsw_m": None}, "hnsw_m must be 0 (exact) or an integer 2..512, got None"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"overwrite": "no"}, "overwrite must be True or False, got str 'no'"),
    ],
)
def test_index_options_refuse_each_value_no_index_can_use_when_built(options, message):

    with pytest.raises(BertWhiteningError) as raised:
        IndexOptions(**options)
    assert str(raised.value) == message


def test_an_index_writer_takes_index_options_alone(tmp_path):

    with pytest.raises(BertWhiteningError) as raised:
        IndexWriter(str(tmp_path / "index"), RECORD, 6, 16)
    assert str(raised.value) == "options must be an IndexOptions, got int 16"
    assert os.listdir(tmp_path) == []


def test_index_directory_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    vectors = unit(rng.normal(size=(25, 6))).astype(np.float32)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join("line %d\n" % i for i in range(25)), encoding="utf-8")
    output = str(tmp_path / "index")
    with IndexWriter(output, RECORD, 6) as writer:
        _add_keyed(writer, [vectors[:10], vectors[10:]], numbered_lines([str(corpus)]))
    assert sorted(os.listdir(output)) == sorted([INDEX_FILE, KEYS_FILE, TEXTS_FILE, RECORD_FILE])
    index = IndexDirectory(output)
    assert {key: index.metadata[key] for key in ("count", "dim", "index", "hnsw_m")} == {
        "count": 25,
        "dim": 6,
        "index": "flat",
        "hnsw_m": None,
    }
    assert index.metadata["pooling"] == RECORD["pooling"]
    np.testing.assert_array_equal(index.vectors(), vectors)
    assert index.rows({12, 0}) == {12: (str(corpus), 13, "line 12"), 0: (str(corpus), 1, "line 0")}
    with pytest.raises(ValueError, match="already exists"):
        IndexWriter(output, RECORD, 6)


@pytest.mark.parametrize("problem", ["norm", "nan", "more-lines", "fewer-lines", "dimension"])
def test_a_failed_index_leaves_no_directory(tmp_path, problem):
    vectors = unit(np.ones((4, 3))).astype(np.float32)
    lines = {"more-lines": 5, "fewer-lines": 3}.get(problem, 4)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("s\n" * lines, encoding="utf-8")
    if problem == "norm":
        vectors[2] *= 2
    if problem == "nan":
        vectors[1, 0] = np.nan
    output = tmp_path / "index"
    message = {
        "norm": r"corpus.txt:3: the vector has norm 2 where L2-normalised vectors have 1",
        "nan": r"corpus.txt:2: the vector holds nan \(column 0\)",
        "more-lines": r"corpus.txt:5: more lines",
        "fewer-lines": "fewer lines",
        "dimension": r"corpus.txt: vectors of dimension 3, but the encoder options give 5 \(m, not whitened\)",
    }[problem]
    with pytest.raises(ValueError, match=message):
        with IndexWriter(str(output), RECORD, 5 if problem == "dimension" else 3, source=str(corpus)) as writer:
            _add_keyed(writer, [vectors], numbered_lines([str(corpus)]))
    assert os.listdir(tmp_path) == ["corpus.txt"]


def write_code_index(directory, codes, rows=64, dim=24, rescore=8, seed=0):
    """An index of ``codes`` of random unit vectors (int8 with a whitening fitted on them); the
    vectors and the whitening."""
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    vectors = unit(np.random.default_rng(seed).normal(size=(rows, dim))).astype(np.float32)
    whitening = fit_whitening(WhiteningStats().update(vectors.astype(np.float64)), codes="int8")
    record = dict(RECORD, model=dict(RECORD["model"], hidden_size=dim))
    if codes == "int8":
        record.update(whitening={"sha256": "0" * 64}, n_components=dim)
    options = IndexOptions(codes=codes, rescore=rescore)
    stored = whitening if codes == "int8" else None
    with IndexWriter(str(directory), record, dim, options, whitening=stored) as writer:
        writer.add(vectors, [("/corpus.txt", i + 1) for i in range(rows)], ["text %d" % i for i in range(rows)])
    return vectors, stored


def queries_of(seed, dim=24, rows=5):
    return unit(np.random.default_rng(seed).normal(size=(rows, dim))).astype(np.float32)


@pytest.mark.parametrize("codes", ["binary", "int8"])
def test_codes_rescored_over_the_whole_corpus_are_exact_float_search(tmp_path, codes):
    from bert_whitening.retrieval.benchmark import exact_search

    vectors, _ = write_code_index(tmp_path / "index", codes)
    opened = IndexDirectory(str(tmp_path / "index"))
    queries = queries_of(1)
    scores, ids = opened.search(queries, 10, rescore=len(vectors))
    exact_ids, exact_scores = exact_search(queries, vectors)
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(scores, exact_scores, atol=1e-6)


@pytest.mark.parametrize("codes", ["binary", "int8"])
def test_many_queries_are_rescored_a_slice_at_a_time_with_the_same_answers(tmp_path, monkeypatch, codes):
    from bert_whitening.retrieval import index_directory

    write_code_index(tmp_path / "index", codes)
    opened = IndexDirectory(str(tmp_path / "index"))
    queries = queries_of(4, rows=23)
    whole = opened.search(queries, 5)
    gathered = []
    monkeypatch.setattr(index_directory, "RESCORE_CHUNK_BYTES", 3 * 8 * 24 * 4)  # 3 queries' 8 rows of 24
    monkeypatch.setattr(opened, "_checked_rows", lambda rows: gathered.append(rows.shape) or rows)
    sliced = opened.search(queries, 5)
    assert gathered == [(3, 8, 24)] * 7 + [(2, 8, 24)]
    for one, other in zip(whole, sliced, strict=True):
        np.testing.assert_array_equal(one, other)


def test_binary_candidates_are_the_nearest_by_hamming_then_ranked_by_cosine(tmp_path):
    from bert_whitening.retrieval.benchmark import exact_search

    vectors, _ = write_code_index(tmp_path / "index", "binary", rescore=8)
    opened = IndexDirectory(str(tmp_path / "index"))
    queries = queries_of(2)
    scores, ids = opened.search(queries, 5)
    bits = lambda rows: np.asarray(rows) > 0  # noqa: E731  the sign bits, unpacked: Hamming by counting
    for query, found, found_scores in zip(queries, ids, scores, strict=True):
        hamming = (bits(vectors) != bits(query[None, :])).sum(axis=1)
        cut = np.sort(hamming)[7]  # the 8th smallest distance: the candidates' farthest
        assert (hamming[found] <= cut).all()  # every hit is among the 8 nearest by Hamming (ties at the cut)
        cosines = vectors @ query
        for row in np.flatnonzero(hamming < cut):  # strictly nearer: always a candidate, so a hit if it scores more
            assert row in found or cosines[row] <= found_scores[-1] + 1e-6
        np.testing.assert_allclose(found_scores, cosines[found], atol=1e-6)  # exact cosines, best first
        assert (np.diff(found_scores) <= 0).all()
    assert (ids != exact_search(queries, vectors, 5)[0]).any()  # 8 candidates of 64: not the exact search


def test_an_index_of_codes_records_its_codes_bytes_and_rescore(tmp_path):
    write_code_index(tmp_path / "index", "binary", dim=24, rescore=8)
    opened = IndexDirectory(str(tmp_path / "index"))
    assert (opened.codes, opened.bytes_per_vector, opened.rescore) == ("binary", 3, 8)
    assert opened.metadata["bytes_per_vector"] == 3 and opened.metadata["files"].keys() >= {"vectors.npy"}
    assert opened.index.code_size == 3  # the searched part holds 3 bytes a vector


@pytest.mark.parametrize(
    "codes, claimed, fragment",
    [
        ("binary", "int8", "index.json: int8 codes without the whitening that scales them"),
        ("int8", "binary", "index.faiss holds a FAISS index of kind b'IxSQ' where b'IBxF' is expected"),
        ("int8", "float32", "index.json lists files"),
    ],
)
def test_an_index_json_claiming_other_codes_is_refused(tmp_path, codes, claimed, fragment):
    write_code_index(tmp_path / "index", codes)
    path = tmp_path / "index" / RECORD_FILE
    metadata = json.loads(path.read_text(encoding="utf-8"))
    metadata.update(codes=claimed, bytes_per_vector={"int8": 24, "binary": 3, "float32": 96}[claimed])
    path.write_text(json.dumps(metadata), encoding="utf-8")
    refused(tmp_path / "index", fragment)


@pytest.mark.parametrize("name", [INDEX_FILE, "vectors.npy"])
def test_a_codes_or_vectors_file_from_another_index_of_codes_is_refused(tmp_path, name):
    write_code_index(tmp_path / "index", "binary")
    write_code_index(tmp_path / "other", "binary", seed=1)
    shutil.copy(tmp_path / "other" / name, tmp_path / "index" / name)
    refused(tmp_path / "index", name, "not the file this index was built with")


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (dict(bytes_per_vector=4), "'bytes_per_vector' is 4, but binary codes of dimension 24 take 3"),
        (dict(rescore=0), "'rescore' is 0, expected a count >= 1"),
        (dict(rescore=None), "'rescore' is None, expected a count >= 1"),
        (dict(codes="int4"), "'codes' is 'int4', expected one of float32, int8, binary"),
        (dict(index="hnsw", hnsw_m=4), "an index of binary codes is flat, not 'hnsw'"),
    ],
)
def test_a_record_of_codes_no_writer_writes_is_refused(tmp_path, edit, fragment):
    write_code_index(tmp_path / "index", "binary")
    path = tmp_path / "index" / RECORD_FILE
    path.write_text(json.dumps(dict(json.loads(path.read_text(encoding="utf-8")), **edit)), encoding="utf-8")
    refused(tmp_path / "index", fragment)


def test_vectors_of_another_shape_are_refused_at_opening(tmp_path):
    write_code_index(tmp_path / "index", "binary")
    path = tmp_path / "index" / "vectors.npy"
    np.save(path, np.zeros((64, 23), dtype=np.float32))
    record = tmp_path / "index" / RECORD_FILE
    metadata = json.loads(record.read_text(encoding="utf-8"))
    metadata["files"]["vectors.npy"] = hashlib.sha256(path.read_bytes()).hexdigest()
    record.write_text(json.dumps(metadata), encoding="utf-8")
    refused(tmp_path / "index", "vectors.npy holds float32 (64, 23); index.json says float32 (64, 24)")


def test_a_vector_written_over_in_place_after_the_check_is_refused_when_rescored(tmp_path):
    vectors, _ = write_code_index(tmp_path / "index", "binary", rescore=64)
    opened = IndexDirectory(str(tmp_path / "index"))
    with open(tmp_path / "index" / "vectors.npy", "r+b") as stream:
        stream.seek(-4, 2)
        stream.write(np.float32(7.0).tobytes())
    with pytest.raises(ValueError, match="vectors.npy changed after it was checked against index.json"):
        opened.search(queries_of(3), 3)


def test_int8_codes_need_the_whitening_that_scales_them(tmp_path):
    with pytest.raises(BertWhiteningError, match="int8 codes take their scales from the whitening"):
        IndexWriter(str(tmp_path / "index"), RECORD, 6, IndexOptions(codes="int8"))


def test_an_index_of_codes_returns_its_float_vectors(tmp_path):
    vectors, _ = write_code_index(tmp_path / "index", "int8")
    np.testing.assert_array_equal(IndexDirectory(str(tmp_path / "index")).vectors(), vectors)


def test_int8_candidates_weigh_each_dimension_by_its_step(tmp_path):
    """Coordinates of spreads 100 times apart (gamma 0 keeps them): int8 codes of such vectors
    rank as their cosines only once each integer is scaled back by its dimension's step, so with
    no more candidates than hits the search still finds the exact nearest rows."""
    from bert_whitening.retrieval.benchmark import exact_search, overlap_at_k
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    rng = np.random.default_rng(5)
    sample = rng.normal(size=(400, 24)) * np.geomspace(10, 0.1, 24)
    whitening = fit_whitening(WhiteningStats().update(sample), gamma=0.0, codes="int8")
    vectors = whitening.transform(sample[:200], n_components=24).astype(np.float32)
    record = dict(RECORD, model=dict(RECORD["model"], hidden_size=24), whitening={"sha256": "0" * 64}, n_components=24)
    with IndexWriter(str(tmp_path / "index"), record, 24, IndexOptions(codes="int8", rescore=5), whitening) as writer:
        writer.add(vectors, [("/corpus.txt", i + 1) for i in range(200)])
    queries = whitening.transform(sample[200:240], n_components=24).astype(np.float32)
    _, ids = IndexDirectory(str(tmp_path / "index")).search(queries, 5)
    assert overlap_at_k(ids, exact_search(queries, vectors, 5)[0]) >= 0.95
