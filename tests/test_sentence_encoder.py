"""The front door: `SentenceEncoder` load, fit, encode, save and load again, against the numpy
whitening of the same pooled vectors."""

import inspect
import json
import os
import pathlib
import re

import numpy as np
import pytest

from bert_whitening import SentenceEncoder
from bert_whitening.encoding import encode
from bert_whitening.errors import BertWhiteningError
from bert_whitening.retrieval.index_directory import IndexOptions
from bert_whitening.whitening import WhiteningStats, fit_whitening, transform_and_normalize

from helpers import SENTENCES, limit_memory_in


@pytest.fixture(scope="module")
def fitted(tiny_model):
    encoder = SentenceEncoder.load(tiny_model[0])
    whitening = encoder.fit(SENTENCES * 3, n_components=12)
    return encoder, whitening


def test_fit_then_encode_is_the_numpy_whitening_of_the_pooled_vectors(fitted, encoders):
    encoder, whitening = fitted
    pooled = encode(encoders["first-last-avg"], SENTENCES * 3).astype(np.float64)
    reference = fit_whitening(WhiteningStats().update(pooled))
    np.testing.assert_allclose(whitening.mean, reference.mean, atol=1e-6)
    expected = transform_and_normalize(pooled[: len(SENTENCES)], reference.kernel[:, :12], reference.bias)
    actual = encoder.encode(SENTENCES)
    assert actual.shape == (len(SENTENCES), 12) and encoder.dim == 12
    # eigenvector signs are fixed by the fit, so columns agree up to round-off
    np.testing.assert_allclose(np.abs(actual), np.abs(expected), atol=1e-4)
    np.testing.assert_allclose(actual @ actual.T, expected @ expected.T, atol=1e-5)


def test_fit_reads_the_sentences_and_every_file_in_calls_of_its_batch_size(tiny_model, encoders, tmp_path, monkeypatch):
    """The sentences and the files given (an empty file among them is no input, not an error)
    are one set of vectors fitted on; every model call holds ``batch_size`` sentences at most."""
    from bert_whitening import encoding

    empty, lines = tmp_path / "empty.txt", tmp_path / "lines.txt"
    empty.write_text("", encoding="utf-8")
    lines.write_text("".join(s + "\n" for s in SENTENCES[8:]), encoding="utf-8")
    batch_sizes, run_batches = [], encoding._run_batches

    def recorded(encoder, sequences, batch_size, *rest):
        batch_sizes.append(batch_size)
        return run_batches(encoder, sequences, batch_size, *rest)

    monkeypatch.setattr(encoding, "_run_batches", recorded)
    encoder = SentenceEncoder.load(tiny_model[0])
    whitening = encoder.fit(SENTENCES * 2, files=[str(empty), str(lines)], batch_size=5)
    assert set(batch_sizes) == {5}
    pooled = encode(encoders["first-last-avg"], SENTENCES * 2 + SENTENCES[8:]).astype(np.float64)
    assert whitening.count == len(pooled)
    np.testing.assert_allclose(whitening.mean, pooled.mean(axis=0), atol=1e-6)
    assert encoder.fit(files=[str(empty), str(lines)]).count == len(SENTENCES[8:])
    assert encoder.fit(SENTENCES * 2, files=[str(empty)]).count == 2 * len(SENTENCES)  # sentences, and no line


def test_a_fit_whitens_from_then_on_with_the_encoder_s_pooling_and_normalised(tiny_model, encoders):
    """An encoder of cls pooling and normalize=False, already used: the fit is of its cls
    vectors, and from then on it gives them whitened and L2-normalised (not with the Keras
    encoder it had built before the fit)."""
    encoder = SentenceEncoder.load(tiny_model[0], pooling="cls", normalize=False)
    pooled = encode(encoders["cls"], SENTENCES * 3).astype(np.float64)
    np.testing.assert_allclose(encoder.encode(SENTENCES), pooled[: len(SENTENCES)], atol=1e-5)  # as pooled
    whitening = encoder.fit(SENTENCES * 3, n_components=12)
    assert whitening.pooling == "cls" and encoder.config.normalize and encoder.dim == 12
    reference = fit_whitening(WhiteningStats().update(pooled))
    expected = transform_and_normalize(pooled[: len(SENTENCES)], reference.kernel[:, :12], reference.bias)
    actual = encoder.encode(SENTENCES)
    assert actual.shape == (len(SENTENCES), 12)
    np.testing.assert_allclose(actual @ actual.T, expected @ expected.T, atol=1e-5)


def test_fit_keeps_more_components_than_the_rank_only_when_the_encoder_allows_it(tiny_model):
    from bert_whitening.errors import WhiteningError

    few = SENTENCES[:8]  # 8 vectors: rank 7 at most, of 24 dimensions
    with pytest.raises(WhiteningError, match="or allow it explicitly"):
        SentenceEncoder.load(tiny_model[0]).fit(few, n_components=12)
    allowing = SentenceEncoder.load(tiny_model[0], allow_rank_deficient=True)
    assert allowing.fit(few, n_components=12).rank < 12
    assert allowing.encode(SENTENCES).shape == (len(SENTENCES), 12)


def test_a_fit_records_the_precision_its_vectors_were_encoded_in(tiny_model):
    from bert_whitening.precision import precision_scope, running

    encoder = SentenceEncoder.load(tiny_model[0])
    assert encoder.fit(SENTENCES * 3).precision == running() == "float32"
    with precision_scope("bfloat16"):
        assert encoder.fit(SENTENCES * 3).precision == "bfloat16"


def test_a_fit_records_how_the_text_was_cut_and_cased_and_another_encoder_refuses_it(fitted, tiny_model, tmp_path):
    """A whitening fitted with --cased --maxlen 16 was applied by an uncased encoder of maxlen 64
    without a word."""
    _, whitening = fitted
    assert whitening.tokenization == {"maxlen": 64, "lowercase": True}
    cased = SentenceEncoder.load(tiny_model[0], maxlen=16, lowercase=False)
    path = str(tmp_path / "cased.npz")
    cased.fit(SENTENCES * 3, n_components=12).save(path)
    with pytest.raises(BertWhiteningError, match="fitted on text cut at maxlen 16, cased, the encoder reads it cut at"):
        SentenceEncoder.load(tiny_model[0], whitening=path).encode(SENTENCES[:2])
    assert SentenceEncoder.load(tiny_model[0], whitening=path, maxlen=16, lowercase=False).encode(
        SENTENCES[:2]
    ).shape == (2, 12)


def test_save_and_load_give_the_same_encoder(fitted, tmp_path):
    encoder, _ = fitted
    encoder.save(str(tmp_path / "saved"))
    again = SentenceEncoder.load(str(tmp_path / "saved"))
    assert again.config.differences(encoder.config.to_config()) == []
    # what it reads: the model and the saved whitening, no flow
    assert again.config.read_paths() == encoder.config.read_paths() + [str(tmp_path / "saved" / "whitening.npz")]
    np.testing.assert_allclose(again.encode(SENTENCES[:5]), encoder.encode(SENTENCES[:5]), atol=1e-6)
    with pytest.raises(ValueError, match="already exists"):
        encoder.save(str(tmp_path / "saved"))


def test_an_encoder_keeping_no_whitened_dimension_saves_and_loads(fitted, tiny_model, tmp_path):
    """With k = 0 the vectors are not whitened: the record names no whitening, and the saved
    directory holds none (it held one the record did not name, and could not be loaded)."""
    _, whitening = fitted
    unwhitened = SentenceEncoder.load(tiny_model[0], whitening=whitening, n_components=0)
    unwhitened.save(str(tmp_path / "saved"))
    again = SentenceEncoder.load(str(tmp_path / "saved"))
    assert os.listdir(tmp_path / "saved") == ["sentence_encoder.json"] and again.dim == 24
    assert again.config.read_paths() == unwhitened.config.read_paths()  # no whitening file it does not read
    np.testing.assert_allclose(again.encode(SENTENCES[:5]), unwhitened.encode(SENTENCES[:5]), atol=1e-6)


def test_an_encoder_with_a_flow_saves_and_loads_it(tiny_model, tmp_path):
    encoder = SentenceEncoder.load(tiny_model[0], pooling="cls")
    encoder.fit_flow(SENTENCES * 3, flow_batch_size=8, config={"n_levels": 2, "depth": 1}, progress=False)
    saved = tmp_path / "saved"
    encoder.save(str(saved))
    assert sorted(os.listdir(saved)) == ["flow.npz", "sentence_encoder.json"]
    again = SentenceEncoder.load(str(saved))
    assert again.config.read_paths() == encoder.config.read_paths() + [str(saved / "flow.npz")]
    np.testing.assert_allclose(again.encode(SENTENCES), encoder.encode(SENTENCES), atol=1e-6)


def test_encode_file_writes_one_row_per_line(fitted, tmp_path):
    encoder, _ = fitted
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    assert encoder.encode_file(str(lines), str(tmp_path / "v.npy")) == len(SENTENCES)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), encoder.encode(SENTENCES), atol=1e-6)


def test_encode_file_writes_nothing_when_the_rows_are_not_one_per_line(fitted, tmp_path, monkeypatch):
    """Row i is line i's vector: an encoding that lost a sentence must not leave a file whose
    rows are shifted against the lines."""
    from bert_whitening import encoding

    stream = encoding.encode_stream

    def losing_the_last(*arguments):
        blocks = list(stream(*arguments))
        yield from blocks[:-1]
        yield blocks[-1][:-1]

    monkeypatch.setattr(encoding, "encode_stream", losing_the_last)
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    with pytest.raises(BertWhiteningError, match="^wrote 15 rows for 16 input lines$"):
        fitted[0].encode_file(str(lines), str(tmp_path / "v.npy"))
    assert os.listdir(tmp_path) == ["lines.txt"]


def test_load_refuses_what_does_not_fit_before_building(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="maxlen 100 is larger than the 64 positions"):
        SentenceEncoder.load(tiny_model[0], maxlen=100)
    with pytest.raises(ValueError, match="n_components 5 needs a whitening"):
        SentenceEncoder.load(tiny_model[0], n_components=5)


def test_fit_refuses_more_components_than_the_model_has_before_encoding(tiny_model, monkeypatch):
    from bert_whitening import models

    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    with pytest.raises(ValueError, match=r"^n_components 1000 is larger than the model's hidden size 24"):
        SentenceEncoder.load(tiny_model[0]).fit(SENTENCES, n_components=1000)


def cosines(a, b):
    """The cosine matrix of the rows of ``a`` and ``b``, by numpy in float64."""
    a, b = (np.asarray(vectors, np.float64) for vectors in (a, b))
    return (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T


def test_similarity_is_the_cosine_matrix_of_sentences_or_vectors(fitted):
    encoder, _ = fitted
    a, b = SENTENCES[:3], SENTENCES[2:7]
    va, vb = encoder.encode(a).astype(np.float64), encoder.encode(b).astype(np.float64)
    expected = cosines(va, vb)
    np.testing.assert_allclose(encoder.similarity(a, b), expected, atol=1e-6)
    np.testing.assert_allclose(encoder.similarity(va * 7, vb.astype(np.float32)), expected, atol=1e-6)
    assert encoder.similarity(a, b).shape == (3, 5) and abs(encoder.similarity(a, a)[2, 2] - 1) < 1e-6
    with pytest.raises(BertWhiteningError, match=r"b: vectors of shape \(2, 5\), not \(n, 12\)"):
        encoder.similarity(va, np.ones((2, 5)))
    with pytest.raises(BertWhiteningError, match="a must be a list of sentences"):
        encoder.similarity("今天天气很好", b)
    np.testing.assert_allclose(encoder.similarity(np.array(a), np.array(b)), expected, atol=1e-6)  # strings
    np.testing.assert_allclose(encoder.similarity(np.array(a, dtype=object), b), expected, atol=1e-6)  # pandas' text
    half_a, half_b = va.astype(np.float16), vb.astype(np.float16)  # normalised in float64, not in float16
    np.testing.assert_allclose(encoder.similarity(half_a, half_b), cosines(half_a, half_b), atol=1e-6)
    broken = va.copy()
    broken[1, 3] = np.nan
    with pytest.raises(BertWhiteningError, match=r"^a: row 1 \(0-based\): the vector holds nan \(column 3\)$"):
        encoder.similarity(broken, vb)
    np.testing.assert_allclose(encoder.similarity(va * 1e300, vb), expected, atol=1e-6)  # beyond float32's range

    for refused, said in ((vb + 1j, "complex128"), (vb > 0, "bool")):  # as WhiteningStats.update says it
        with pytest.raises(
            BertWhiteningError, match=r"^b: holds %s, expected vectors of real numbers \(float or int\)$" % said
        ):
            encoder.similarity(va, refused)


def brute_force(encoder, corpus, queries, top_k):
    """The cosines of each query's top_k corpus rows, by numpy over the encoder's vectors (rows
    of equal cosines may come in any order, so the rows themselves are checked one by one)."""
    return -np.sort(-encoder.similarity(queries, corpus), axis=1)[:, :top_k]


@pytest.mark.parametrize("on_disk", [False, True])
def test_index_search_finds_what_brute_force_finds(fitted, tmp_path, on_disk):
    encoder, _ = fitted
    corpus, queries = SENTENCES * 2, SENTENCES[:4]
    index = encoder.index(corpus, path=str(tmp_path / "index") if on_disk else None)
    results = index.search(queries, top_k=5)
    cosines = brute_force(encoder, corpus, queries, 5)
    for result, query, expected_cosines in zip(results, queries, cosines, strict=True):
        assert result["query"] == query and [hit["rank"] for hit in result["hits"]] == [1, 2, 3, 4, 5]
        np.testing.assert_allclose([hit["score"] for hit in result["hits"]], expected_cosines, atol=1e-5)
        for hit in result["hits"]:  # each hit's text is its row's, and its score that row's cosine
            assert hit["text"] == corpus[hit["line"] - 1]
            assert abs(encoder.similarity([query], [hit["text"]])[0, 0] - hit["score"]) < 1e-5
    assert json.loads(json.dumps(results)) == results  # plain numbers: the hits serialise as they are
    if on_disk:
        assert results[0]["hits"][0]["file"] == "(sentences)"
        assert (tmp_path / "index" / "index.json").exists()
        with pytest.raises(BertWhiteningError, match="already exists"):
            encoder.index(corpus, path=str(tmp_path / "index"))
    with pytest.raises(BertWhiteningError, match="top_k must be a positive integer"):
        index.search(queries, top_k=0)
    # a top_k beyond the corpus gives every row once (FAISS would allocate top_k results a query)
    for result in index.search(queries, top_k=10**12):
        assert sorted(hit["line"] for hit in result["hits"]) == list(range(1, len(corpus) + 1))


def test_an_encoder_that_does_not_normalise_writes_an_index_of_cosines(tiny_model, tmp_path):
    """An index holds L2-normalised vectors: an encoder of normalize=False writes its vectors
    normalised (an index directory refuses unnormalised ones), and scores cosines."""
    encoder = SentenceEncoder.load(tiny_model[0], normalize=False)
    corpus, queries = SENTENCES, SENTENCES[:3]
    on_disk = encoder.index(corpus, path=str(tmp_path / "index")).search(queries, top_k=4)
    for result, expected_cosines in zip(on_disk, brute_force(encoder, corpus, queries, 4), strict=True):
        np.testing.assert_allclose([hit["score"] for hit in result["hits"]], expected_cosines, atol=1e-5)


def test_an_index_on_disk_searches_what_it_wrote_whatever_bears_its_name_since(fitted, tmp_path):
    """The directory `SentenceEncoder.index` writes is opened once, checked, and searched from
    then on: another index renamed over its path is not what its searches read."""
    encoder, _ = fitted
    path, other = str(tmp_path / "index"), str(tmp_path / "other")
    index = encoder.index(SENTENCES[:6], path=path)
    encoder.index(SENTENCES[6:], path=other)
    os.rename(path, str(tmp_path / "moved"))
    os.rename(other, path)
    for result in index.search(SENTENCES[:2], top_k=3):
        assert [hit["rank"] for hit in result["hits"]] == [1, 2, 3]
        assert all(hit["text"] in SENTENCES[:6] for hit in result["hits"]), result


def test_an_index_in_memory_searches_as_it_was_built_whatever_its_encoder_becomes(tiny_model):
    """Its corpus vectors were encoded by the encoder as it was: a later fit must not whiten the
    queries alone (wrong hits without an error) or change their dimension (FAISS's assertion)."""
    encoder = SentenceEncoder.load(tiny_model[0])
    index = encoder.index(SENTENCES)
    before = index.search(SENTENCES[:3], top_k=4)
    encoder.fit(SENTENCES * 3, n_components=12)
    assert encoder.dim == 12 and index.search(SENTENCES[:3], top_k=4) == before


@pytest.mark.parametrize(
    "arguments, said",
    [
        (dict(path="index", hnsw_m=1), "hnsw_m must be 0 (exact) or an integer 2..512, got 1"),
        (dict(path="index", hnsw_m=-1), "hnsw_m must be 0 (exact) or an integer 2..512, got -1"),
        (dict(path="index", hnsw_m=True), "hnsw_m must be 0 (exact) or an integer 2..512, got True"),
        (dict(path="index", hnsw_m=1.5), "hnsw_m must be 0 (exact) or an integer 2..512, got 1.5"),
        (dict(hnsw_m=16), "hnsw_m is for an index written to a path; an index in memory is exact"),
        (dict(overwrite=True), "overwrite is for an index written to a path; an index in memory replaces none"),
        (
            dict(hsnw_m=16),
            "unknown option 'hsnw_m' (IndexOptions takes: hnsw_m, batch_size, overwrite, codes, rescore)",
        ),
        (dict(codes="binary"), "codes are for an index written to a path; an index in memory holds float32"),
        (dict(path="index", codes="int4"), "codes must be one of float32, int8, binary, got 'int4'"),
        (dict(path="index", codes="binary", rescore=0), "rescore must be a positive integer, got 0"),
        (dict(batch_size=0), "batch_size must be a positive integer, got 0"),
        (
            dict(path="index", options=IndexOptions(), hnsw_m=16),
            "options: give an IndexOptions or its keywords, not both (hnsw_m given too)",
        ),
    ],
)
def test_an_hnsw_m_faiss_cannot_take_is_refused_before_anything_is_built(fitted, tmp_path, arguments, said):
    """M 1 crashed the process in FAISS, a negative M allocated without bound."""
    encoder, _ = fitted
    if "path" in arguments:
        arguments["path"] = str(tmp_path / arguments["path"])
    with pytest.raises(BertWhiteningError, match="^%s$" % re.escape(said)):
        encoder.index(SENTENCES, **arguments)
    assert os.listdir(tmp_path) == []


def test_an_index_of_binary_codes_written_to_a_path_answers_with_float_cosines(fitted, tmp_path):
    encoder, _ = fitted
    exact = encoder.index(SENTENCES).search(SENTENCES[:2], top_k=3)
    coded = encoder.index(SENTENCES, str(tmp_path / "index"), codes="binary", rescore=len(SENTENCES))
    assert coded._index.codes == "binary"
    found = coded.search(SENTENCES[:2], top_k=3)
    assert [[hit["corpus_id"] for hit in result["hits"]] for result in found] == [
        [hit["corpus_id"] for hit in result["hits"]] for result in exact
    ]
    assert found[0]["hits"][0]["score"] == pytest.approx(exact[0]["hits"][0]["score"], abs=1e-5)


def test_an_empty_corpus_is_refused_in_memory_as_on_disk(fitted):
    encoder, _ = fitted
    with pytest.raises(BertWhiteningError, match="no sentences to index"):
        encoder.index([])


@pytest.mark.parametrize(
    "arguments, said",
    [
        (dict(top_k=0), "top_k must be a positive integer, got 0"),
        (dict(top_k=True), "top_k must be a positive integer"),
        (dict(precision="x"), "unknown precision 'x'"),
        (dict(text="no"), "text must be True or False, got str 'no'"),
        (dict(text=True, model_type="wobert"), "--text is not available for wobert: it splits words with jieba"),
        (
            dict(precision="bfloat16", model_type="nezha"),
            "--precision bfloat16 exports a plain BERT's products in bfloat16, and this nezha model has the nezha",
        ),
    ],
)
def test_export_refuses_its_options_before_the_model_is_built(tiny_model, tmp_path, monkeypatch, arguments, said):
    """top_k 0 failed FAISS's assertion after the whole SavedModel was built; a word-level
    model's --text and a bfloat16 export of a model FusedBert does not compute, once it was built."""
    from bert_whitening import models

    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    model_type = arguments.pop("model_type", "bert")
    with pytest.raises(BertWhiteningError, match=re.escape(said)):
        SentenceEncoder.load(tiny_model[0], model_type=model_type).export(str(tmp_path / "served"), **arguments)
    assert os.listdir(tmp_path) == []


def test_export_refuses_a_version_it_would_replace_that_holds_its_corpus(fitted, tmp_path, monkeypatch):
    """The corpus index is an input of the export: one inside the version that ``overwrite``
    replaces is refused before the model is built, not removed with that version."""
    from bert_whitening import models

    index = tmp_path / "served" / "1" / "index"
    index.parent.mkdir(parents=True)
    fitted[0].index(SENTENCES, path=str(index))
    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    with pytest.raises(BertWhiteningError) as raised:
        SentenceEncoder(fitted[0].config).export(str(tmp_path / "served"), version=1, overwrite=True, corpus=str(index))
    assert str(raised.value) == "cannot write %s: it contains the input directory %s; choose another output" % (
        index.parent,
        index,
    )
    assert os.listdir(index.parent) == ["index"]


def test_a_saved_encoder_is_loaded_as_saved_and_refuses_other_arguments(fitted, tmp_path):
    """Arguments given with a saved encoder's directory were ignored (its dim, pooling, maxlen
    and normalisation kept): they are refused, naming each."""
    encoder, _ = fitted
    saved = str(tmp_path / "saved")
    encoder.save(saved)
    with pytest.raises(BertWhiteningError) as raised:
        SentenceEncoder.load(saved, n_components=16, pooling="cls", maxlen=8, normalize=False)
    assert str(raised.value) == (
        "%s: a saved encoder is loaded as saved: n_components, pooling, maxlen, normalize given (load it alone, "
        "or load its model with them)" % saved
    )
    for default in ({"maxlen": 64}, {"normalize": True}, {"whitening": None}):  # a default, given, is given
        with pytest.raises(BertWhiteningError, match="loaded as saved: %s given" % next(iter(default))):
            SentenceEncoder.load(saved, **default)
    with pytest.raises(BertWhiteningError, match="loaded as saved: whitening, n_components given"):
        SentenceEncoder.load(saved, None, 8)
    assert inspect.signature(SentenceEncoder.load).parameters["maxlen"].default == 64  # help() shows the defaults
    assert SentenceEncoder.load(model=pathlib.Path(saved)).config.differences(encoder.config.to_config()) == []
    assert SentenceEncoder.load(pathlib.Path(saved)).config.differences(encoder.config.to_config()) == []


@pytest.mark.parametrize(
    "options, said",
    [
        ({"n_components": 1.5}, "n_components must be an integer, got float 1.5"),
        ({"n_components": True}, "n_components must be an integer, got bool True"),
        ({"n_components": "64"}, "n_components must be an integer, got str '64'"),
        ({"n_components": float("nan")}, "n_components must be an integer, got float nan"),
        ({"n_components": "0"}, "n_components must be an integer, got str '0'"),
        ({"maxlen": "64"}, "maxlen must be a positive integer, got '64'"),
        ({"maxlen": None}, "maxlen must be an integer, got NoneType None"),
        ({"maxlen": 3.5}, "maxlen must be a positive integer, got 3.5"),
        ({"maxlen": True}, "maxlen must be a positive integer, got True"),
        ({"model": 123}, "model must be a path .str or pathlib.Path., got int 123"),
        ({"model_type": None}, "model_type must be a str, got NoneType None"),
        ({"pooling": 1}, "pooling must be a str, got int 1"),
        ({"whitening": 123}, "whitening must be a Whitening .* got int 123"),
        ({"flow": 123}, "flow must be a Flow .* got int 123"),
        ({"lowercase": "no"}, "lowercase must be True or False, got str 'no'"),
        ({"normalize": "False"}, "normalize must be True or False, got str 'False'"),
        ({"allow_rank_deficient": 1}, "allow_rank_deficient must be True or False, got int 1"),
    ],
)
def test_load_refuses_an_argument_of_the_wrong_type_in_one_line(tiny_model, options, said):
    with pytest.raises(BertWhiteningError, match=said) as error:
        SentenceEncoder.load(**{"model": tiny_model[0], **options})
    assert "\n" not in str(error.value)


def test_a_numpy_bool_is_a_bool(tiny_model):
    encoder = SentenceEncoder.load(tiny_model[0], lowercase=np.bool_(False))
    assert encoder.config.lowercase is False


def test_paths_may_be_pathlib_and_must_be_paths(fitted, tmp_path):
    encoder, _ = fitted
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(s + "\n" for s in SENTENCES[:3]), encoding="utf-8")
    assert encoder.encode_file(lines, tmp_path / "v.npy") == 3
    refused = [
        (lambda: encoder.encode_file(str(lines), None), "output must be a path"),
        (lambda: encoder.encode_file([str(lines)], str(tmp_path / "w.npy")), "path must be a path .* got list"),
        (lambda: encoder.encode_file(None, str(tmp_path / "w.npy")), "path must be a path .* got NoneType"),
        (lambda: encoder.save(None), "directory must be a path .* got NoneType"),
        (lambda: encoder.export(None), "base must be a path .* got NoneType"),
    ]
    for call, said in refused:
        with pytest.raises(BertWhiteningError, match=said):
            call()
    assert not (tmp_path / "w.npy").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"epoch": 3}, r"^unknown flow option 'epoch' \(did you mean epochs\?\)$"),
        ({"flow_batch_sizes": 8}, r"^unknown flow option 'flow_batch_sizes' \(did you mean flow_batch_size\?\)$"),
        ({"epochs": float("nan")}, r"^epochs must be a number above 0 and at most 10000, got nan$"),
        ({"epochs": float("inf")}, r"^epochs must be a number above 0 and at most 10000, got inf$"),
        ({"epochs": 0}, r"^epochs must be"),
        ({"config": "x"}, r"^config must be a FlowConfig, a dict or None, got str 'x'$"),
        ({"config": {"depth": 0}}, r"^flow depth is 0"),
        ({"seed": "x"}, r"^seed must be a whole number, got str 'x'$"),
        ({"seed": -1}, r"^seed must be a whole number >= 0, got -1$"),
        ({"flow_batch_size": 0}, r"^flow_batch_size must be a positive integer, got 0$"),
        ({"flow_batch_size": 2.5}, r"^flow_batch_size must be a whole number, got float 2.5$"),
        ({"learning_rate": float("nan")}, r"^learning_rate must be a finite number above 0, got nan$"),
        ({"learning_rate": -1}, r"^learning_rate must be a finite number above 0, got -1$"),
        ({"learning_rate": "1e-3"}, r"^learning_rate must be a number, got str '1e-3'$"),
    ],
)
def test_fit_flow_refuses_its_options_before_the_model_is_built(tiny_model, monkeypatch, options, message):
    from bert_whitening.errors import FlowError

    encoder = SentenceEncoder.load(tiny_model[0])
    monkeypatch.setattr(SentenceEncoder, "_pooled_encoder", lambda self: pytest.fail("the model was built"))
    with pytest.raises(FlowError, match=message):
        encoder.fit_flow(SENTENCES, **options)


def test_fit_flow_takes_the_flow_batch_size_apart_from_the_encoding_one(tiny_model):
    from bert_whitening.errors import FlowError

    encoder = SentenceEncoder.load(tiny_model[0])
    sentences = SENTENCES * 3
    with pytest.raises(FlowError, match="make no training step: set flow_batch_size to at most %d " % len(sentences)):
        encoder.fit_flow(sentences, batch_size=8, config={"n_levels": 2, "depth": 1}, progress=False)
    flow = encoder.fit_flow(
        sentences, batch_size=8, flow_batch_size=8, config={"n_levels": 2, "depth": 1}, progress=False
    )
    assert flow.training_summary["batch_size"] == 8
    assert flow.training_summary["steps"] == len(sentences) // 8


def test_fit_flow_on_no_sentence_is_refused_in_one_line(tiny_model):
    from bert_whitening.errors import DataError

    with pytest.raises(DataError, match="^no sentences to train a flow on$"):
        SentenceEncoder.load(tiny_model[0]).fit_flow([])


def test_fit_flow_refuses_vectors_that_cannot_be_kept_at_the_block_that_does_not_fit(tiny_model, tmp_path, monkeypatch):
    """A flow trains on every vector at once: the sentences given and the files' (in chunks of 3)
    are kept block by block, each block checked with those before it as held and joined
    (twice 4 bytes a column of dimension 24). A byte short of the 13 given, the last block is
    refused and no flow trains; with room for them, the flow trains on all 13, in order."""
    from bert_whitening import encoding, flow
    from bert_whitening.errors import DataError
    from bert_whitening.io.bounded import MemoryLimit

    path = tmp_path / "sentences.txt"
    path.write_text("".join(sentence + "\n" for sentence in SENTENCES[:8]), encoding="utf-8")
    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 3)
    trained = []
    monkeypatch.setattr(flow, "fit_flow", lambda vectors, **options: trained.append(vectors) or pytest.fail("trained"))
    encoder = SentenceEncoder.load(tiny_model[0])
    limit_memory_in(monkeypatch, encoding, MemoryLimit(2 * 4 * 13 * 24 - 1, "the {} of a test"))
    with pytest.raises(DataError, match=r"^keeping the vectors of 13 sentences needs at least .*24 columns, held and"):
        encoder.fit_flow(SENTENCES[:5], files=[str(path)], progress=False, flow_batch_size=4)
    assert not trained
    limit_memory_in(monkeypatch, encoding, MemoryLimit(2 * 4 * 13 * 24, "the {} of a test"))
    with pytest.raises(pytest.fail.Exception, match="trained"):
        encoder.fit_flow(SENTENCES[:5], files=[str(path)], progress=False, flow_batch_size=4)
    expected = encoding.encode(encoder._pooled_encoder(), SENTENCES[:5] + SENTENCES[:8])
    np.testing.assert_allclose(trained[0], expected, atol=1e-5)


def test_encode_file_refuses_its_batch_size_before_the_model_is_built(tiny_model, tmp_path, monkeypatch):
    from bert_whitening import models

    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    (tmp_path / "in.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(BertWhiteningError, match="^batch_size must be a positive integer, got 0$"):
        SentenceEncoder.load(tiny_model[0]).encode_file(str(tmp_path / "in.txt"), str(tmp_path / "o.npy"), batch_size=0)


@pytest.mark.parametrize("kind", ["whitening", "flow"])
def test_a_fitted_file_of_another_dimension_is_refused_before_its_arrays_are_read(
    tiny_model, tmp_path, monkeypatch, kind
):
    """A crafted 8192-dimensional whitening was read and checked whole (25 s, 2.3 GB), and a
    4096-dimensional flow built (81 s), before the model's hidden size refused them."""
    from bert_whitening.flow import fit_flow
    from bert_whitening.io import bounded

    vectors = np.random.default_rng(0).normal(size=(80, 40))
    path = str(tmp_path / ("%s.npz" % kind))
    if kind == "whitening":
        fit_whitening(WhiteningStats().update(vectors)).save(path)
    else:
        fit_flow(vectors, {"n_levels": 1, "depth": 1, "coupling_width": 8}, progress=False).save(path)
    read = bounded.NpzMembers.array

    def metadata_only(self, name, *arguments, **keywords):
        assert name == "meta", "%s read before the dimension was compared" % name
        return read(self, name, *arguments, **keywords)

    monkeypatch.setattr(bounded.NpzMembers, "array", metadata_only)
    with pytest.raises(
        BertWhiteningError,
        match="^%s: the %s has dimension 40 but the model's hidden size is 24" % (re.escape(path), kind),
    ):
        SentenceEncoder.load(tiny_model[0], **{kind: path})


def test_a_used_encoder_copies_and_pickles_as_its_configuration(fitted):
    """Once its Keras models were built, a copy failed deep inside Keras (joblib and
    multiprocessing pickle what they are given)."""
    import copy
    import pickle

    from bert_whitening.config import whitening_digest

    encoder, _ = fitted
    expected = encoder.encode(SENTENCES)
    for copied in (copy.deepcopy(encoder), pickle.loads(pickle.dumps(encoder))):
        assert whitening_digest(copied.config.whitening) == whitening_digest(encoder.config.whitening)
        assert copied.config.differences(encoder.config.to_config()) == []
        assert copied.config != encoder.config  # identity: field by field, numpy refused the whitenings' arrays
        np.testing.assert_array_equal(copied.encode(SENTENCES), expected)


def test_an_encoder_s_configuration_cannot_be_changed_under_it(fitted):
    """A pooling set on the configuration was not what encode used, and was what save wrote."""
    import dataclasses

    encoder, _ = fitted
    with pytest.raises(dataclasses.FrozenInstanceError):
        encoder.config.pooling = "cls"
    with pytest.raises(AttributeError):
        encoder.config = dataclasses.replace(encoder.config, pooling="cls")
    assert encoder.config.pooling == "first-last-avg"


def test_an_encoder_fitted_with_codes_encodes_into_them_and_floats_on_request(tiny_model):
    encoder = SentenceEncoder.load(tiny_model[0])
    whitening = encoder.fit(SENTENCES * 3, n_components=12, codes="int8")
    assert whitening.codes == "int8" and whitening.code_scales.shape == (whitening.dim,)
    floats = encoder.encode(SENTENCES, codes="float32")
    ints = encoder.encode(SENTENCES)
    steps = whitening.quantizer(12).steps
    assert ints.dtype == np.int8 and ints.shape == (len(SENTENCES), 12)
    np.testing.assert_array_equal(ints, np.clip(np.rint(floats.astype(np.float64) / steps), -127, 127))
    assert encoder.encode(SENTENCES, codes="binary").tolist() == np.packbits(floats > 0, axis=1).tolist()
    with pytest.raises(BertWhiteningError, match="codes 'int8' are the output: precision"):
        encoder.encode(SENTENCES, precision="ubinary")
    with pytest.raises(BertWhiteningError, match="codes must be one of float32, int8, binary, got 'int4'"):
        encoder.encode(SENTENCES, codes="int4")


def test_a_flow_fitted_with_a_bar_counts_the_sentences_on_it_and_its_steps_apart(tiny_model, monkeypatch):
    """``fit --method flow`` passed its encoding bar on, and the flow's steps were counted on it."""
    from bert_whitening import flow

    class Counted:
        done = 0

        def update(self, n=1):
            self.done += n

    steps_shown = []
    progress_of = flow.progress_of
    monkeypatch.setattr(
        flow, "progress_of", lambda shown, *rest: steps_shown.append(shown) or progress_of(False, *rest)
    )
    bar = Counted()
    encoder = SentenceEncoder.load(tiny_model[0], pooling="cls")
    encoder.fit_flow(SENTENCES * 3, flow_batch_size=8, config={"n_levels": 2, "depth": 1}, progress=bar)
    assert bar.done == len(SENTENCES) * 3 and steps_shown == [None]


def test_similarity_of_an_encoder_with_codes_is_the_cosine_of_its_codes(tiny_model):
    """int8: the cosine of the integers scaled by the spread the whitening recorded (6 of it over
    127 and the spreads' norm); binary: of the +-1 vectors of the signs; sentences, vectors and
    codes alike."""
    encoder = SentenceEncoder.load(tiny_model[0])
    whitening = encoder.fit(SENTENCES * 3, n_components=12, codes="int8")
    a, b = SENTENCES[:3], SENTENCES[2:7]
    fa, fb = (encoder.encode(side, codes="float32").astype(np.float64) for side in (a, b))
    rms = whitening.code_scales[:12]
    step = 6.0 * rms / (127 * np.linalg.norm(rms))
    int8 = cosines(*(np.clip(np.rint(side / step), -127, 127) * step for side in (fa, fb)))
    binary = np.where(fa > 0, 1.0, -1.0) @ np.where(fb > 0, 1.0, -1.0).T / 12
    assert np.abs(int8 - cosines(fa, fb)).max() > 1e-5  # the codes' cosine is not the floats'
    np.testing.assert_allclose(encoder.similarity(a, b), int8, atol=1e-6)
    np.testing.assert_allclose(encoder.similarity(encoder.encode(a), fb * 3), int8, atol=1e-6)  # codes, vectors
    np.testing.assert_allclose(encoder.similarity(a, b, codes="float32"), cosines(fa, fb), atol=1e-6)
    np.testing.assert_allclose(encoder.similarity(a, b, codes="binary"), binary, atol=1e-6)
    packed = encoder.encode(b, codes="binary")
    np.testing.assert_allclose(encoder.similarity(fa, packed, codes="binary"), binary, atol=1e-6)
    pairwise = encoder.similarity_pairwise(a, b[:3])
    assert pairwise.dtype == np.float32
    np.testing.assert_allclose(pairwise, np.diag(int8[:, :3]), atol=1e-6)
    np.testing.assert_allclose(encoder.similarity_pairwise(a, packed[:3], codes="binary"), np.diag(binary), atol=1e-6)
    with pytest.raises(BertWhiteningError, match=r"^b: expected int8 codes of shape \(n, 12\), got uint8 of shape"):
        encoder.similarity(a, packed)
    with pytest.raises(BertWhiteningError, match=r"^a and b: rows paired one to one, got 3 and 2$"):
        encoder.similarity_pairwise(a, encoder.encode(b[:2]))
    with pytest.raises(BertWhiteningError, match="codes must be one of float32, int8, binary, got 'int4'"):
        encoder.similarity(a, b, codes="int4")
