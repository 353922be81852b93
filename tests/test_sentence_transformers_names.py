"""What a sentence-transformers user types, taken with sentence-transformers' meaning or refused in
one line naming our equivalent (`bert_whitening.sentence_transformers_names`): a table of calls,
one test a row; `semantic_search` against a brute force written here; the hits' ``corpus_id``."""

import json

import numpy as np
import pytest

from bert_whitening import EncoderConfig, SentenceEncoder, semantic_search
from bert_whitening import sentence_transformers_names as names
from bert_whitening.errors import BertWhiteningError

from helpers import SENTENCES, run

A, B = SENTENCES[:5], SENTENCES[5:10]


@pytest.fixture(scope="module")
def plain(tiny_model):
    """The tiny model, L2-normalised (load's default), and its vectors of `A` by `encode` alone."""
    encoder = SentenceEncoder.load(tiny_model[0])
    return encoder, encoder.encode(A)


@pytest.fixture(scope="module")
def raw(tiny_model):
    """The tiny model without the normalisation, and its vectors of `A`."""
    encoder = SentenceEncoder.load(tiny_model[0], normalize=False)
    return encoder, encoder.encode(A)


def packed_signs(vectors):
    """Each row's signs (positive: 1) as bytes, first dimension in the high bit, written bit by bit."""
    rows = []
    for row in np.asarray(vectors):
        bits = [1 if value > 0 else 0 for value in row] + [0] * (-len(row) % 8)
        rows.append(
            [sum(bit << (7 - place) for place, bit in enumerate(bits[at : at + 8])) for at in range(0, len(bits), 8)]
        )
    return np.array(rows)


def same_as_encode(encoder, expected, **keywords):
    np.testing.assert_array_equal(encoder.encode(A, **keywords), expected)


def check_constructor_loads(get):
    tiny_model = get("tiny_model")
    plain = get("plain")
    encoder = SentenceEncoder(tiny_model[0])
    assert encoder.config.to_config() == plain[0].config.to_config()
    np.testing.assert_allclose(encoder.encode(A), plain[1], atol=1e-6)


def check_constructor_takes_load_arguments(get):
    tiny_model = get("tiny_model")
    encoder = SentenceEncoder(tiny_model[0], pooling="cls", maxlen=32, device="cpu")
    assert (
        encoder.config.to_config() == SentenceEncoder.load(tiny_model[0], pooling="cls", maxlen=32).config.to_config()
    )
    assert (encoder.config.pooling, encoder.max_seq_length) == ("cls", 32)


def check_constructor_loads_a_saved_encoder(get):
    plain = get("plain")
    tmp_path = get("tmp_path")
    plain[0].save(str(tmp_path / "saved"))
    assert (
        SentenceEncoder(str(tmp_path / "saved")).config.to_config()
        == SentenceEncoder.load(str(tmp_path / "saved")).config.to_config()
    )


def check_show_progress_bar(get):
    plain = get("plain")
    monkeypatch = get("monkeypatch")
    from bert_whitening import encoding

    given, original = [], encoding.encode

    def recorded(encoder, texts, batch_size, progress):
        given.append(progress)
        return original(encoder, texts, batch_size, progress)

    monkeypatch.setattr(encoding, "encode", recorded)
    for shown in (True, False):
        same_as_encode(plain[0], plain[1], show_progress_bar=shown)
    same_as_encode(plain[0], plain[1])
    assert given == [True, False, None]


def check_batch_size(get):
    from bert_whitening import encoding

    plain, monkeypatch = get("plain"), get("monkeypatch")
    sizes, original = [], encoding._run_batches

    def recorded(encoder, sequences, batch_size, *rest):
        sizes.append(batch_size)
        return original(encoder, sequences, batch_size, *rest)

    monkeypatch.setattr(encoding, "_run_batches", recorded)
    np.testing.assert_allclose(plain[0].encode(A, batch_size=2), plain[1], atol=1e-6)
    assert sizes == [2]  # the model called with batches of 2 sentences


def check_normalize_embeddings(get):
    raw = get("raw")
    encoder, vectors = raw
    unit = encoder.encode(A, normalize_embeddings=True)
    np.testing.assert_allclose(unit, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), atol=1e-6)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1)  # so the division above did something
    same_as_encode(encoder, vectors, normalize_embeddings=False)  # as the model makes them, as there


def check_convert_to_numpy_false(get):
    plain = get("plain")
    rows = plain[0].encode(A, convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == len(A)
    for row, expected in zip(rows, plain[1], strict=True):
        assert isinstance(row, np.ndarray) and row.shape == (plain[0].dim,)
        np.testing.assert_array_equal(row, expected)


def check_precision_binary(get):
    plain = get("plain")
    codes = plain[0].encode(A, precision="binary")
    assert codes.dtype == np.int8 and codes.shape == (len(A), (plain[0].dim + 7) // 8)
    np.testing.assert_array_equal(codes.astype(int), packed_signs(plain[1]) - 128)


def check_precision_ubinary(get):
    plain = get("plain")
    codes = plain[0].encode(A, precision="ubinary")
    assert codes.dtype == np.uint8
    np.testing.assert_array_equal(codes.astype(int), packed_signs(plain[1]))


def check_defaults_that_change_nothing(get):
    plain = get("plain")
    for keywords in (
        dict(precision="float32"),
        dict(convert_to_numpy=True),
        dict(convert_to_tensor=False),
        dict(device=None),
        dict(device="cpu"),
        dict(output_value="sentence_embedding"),
        dict(prompt=None),
        dict(prompt_name=None),
        dict(truncate_dim=None),
        dict(chunk_size=None),
        dict(pool=None),
    ):
        same_as_encode(plain[0], plain[1], **keywords)


def check_dimension_and_max_seq_length(get):
    plain = get("plain")
    assert plain[0].get_sentence_embedding_dimension() == plain[1].shape[1] == plain[0].dim
    assert plain[0].max_seq_length == 64 == plain[0].config.maxlen


def check_similarity_pairwise(get):
    plain = get("plain")
    encoder = plain[0]
    expected = np.diag(encoder.similarity(A, B))
    got = encoder.similarity_pairwise(A, B)
    assert got.shape == (len(A),) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-6)
    vectors_b = encoder.encode(B) * 3.0  # arrays are normalised, as similarity normalises them
    np.testing.assert_allclose(encoder.similarity_pairwise(plain[1], vectors_b), expected, atol=1e-6)


WORKS = {
    "SentenceTransformer(path)": check_constructor_loads,
    "SentenceTransformer(path, device='cpu', ...load's arguments)": check_constructor_takes_load_arguments,
    "SentenceTransformer(saved directory)": check_constructor_loads_a_saved_encoder,
    "encode(show_progress_bar=True/False)": check_show_progress_bar,
    "encode(batch_size=2)": check_batch_size,
    "encode(normalize_embeddings=True/False)": check_normalize_embeddings,
    "encode(convert_to_numpy=False)": check_convert_to_numpy_false,
    "encode(precision='binary')": check_precision_binary,
    "encode(precision='ubinary')": check_precision_ubinary,
    "encode(defaults that change nothing)": check_defaults_that_change_nothing,
    "get_sentence_embedding_dimension(), max_seq_length": check_dimension_and_max_seq_length,
    "similarity_pairwise(a, b)": check_similarity_pairwise,
}


@pytest.mark.parametrize("name", list(WORKS))
def test_a_sentence_transformers_call_works_with_its_meaning(name, request):
    WORKS[name](request.getfixturevalue)  # each check asks for the fixtures it needs


def encode_with(**keywords):
    return lambda encoder: encoder.encode(A, **keywords)


#: ``(call, the one line it is refused with)``: each refused before the model is built.
REFUSED = {
    "encode(convert_to_tensor=True)": (encode_with(convert_to_tensor=True), r"^convert_to_tensor: no tensors: .*numpy"),
    "encode(device='cuda')": (encode_with(device="cuda"), r"^device: bert-whitening encodes on the CPU"),
    "SentenceTransformer(path, device='cuda')": (
        lambda encoder: SentenceEncoder(encoder.config.model, device="cuda"),
        r"^device: bert-whitening encodes on the CPU",
    ),
    "encode(output_value='token_embeddings')": (
        encode_with(output_value="token_embeddings"),
        r"^output_value: encode gives pooled sentence vectors only; .*pooling=",
    ),
    "encode(output_value=None)": (encode_with(output_value=None), r"^output_value: encode gives pooled"),
    "encode(prompt_name='query')": (encode_with(prompt_name="query"), r"^prompt_name: .*prepend the prompt"),
    "encode(prompt='query: ')": (encode_with(prompt="query: "), r"^prompt: .*prepend the prompt"),
    "encode(truncate_dim=8)": (encode_with(truncate_dim=8), r"^truncate_dim: .*n_components=k"),
    "encode(chunk_size=10)": (encode_with(chunk_size=10), r"^chunk_size: .*beam-encode"),
    "encode(pool=...)": (encode_with(pool={}), r"^pool: .*beam-encode"),
    "encode(precision='int8')": (encode_with(precision="int8"), r"^precision 'int8': .*calibrates it on the call"),
    "encode(precision='uint8')": (encode_with(precision="uint8"), r"^precision 'uint8': .*calibrates"),
    "encode(precision='bfloat16')": (encode_with(precision="bfloat16"), r"set_precision\('bfloat16'\)$"),
    "encode(precision='float16')": (encode_with(precision="float16"), r"^precision must be one of float32, binary"),
    "encode(precision=8)": (encode_with(precision=8), r"^precision must be one of .*, got 8$"),
    "encode(show_progress_bar=..., progress=...)": (
        encode_with(show_progress_bar=True, progress=False),
        r"^progress and show_progress_bar say the same: give one$",
    ),
    "encode(show_progress_bar='yes')": (encode_with(show_progress_bar="yes"), r"^show_progress_bar must be True or"),
    "encode(normalize_embeddings=1)": (encode_with(normalize_embeddings=1), r"^normalize_embeddings must be True or"),
    "encode(convert_to_numpy='no')": (encode_with(convert_to_numpy="no"), r"^convert_to_numpy must be True or"),
    "encode('one sentence')": (lambda encoder: encoder.encode("一句"), r"one sentence: put it in a list"),
    "model.max_seq_length = 128": (
        lambda encoder: setattr(encoder, "max_seq_length", 128),
        r"^max_seq_length is this encoder's maxlen.*maxlen=128$",
    ),
    "similarity_pairwise(a, b of another length)": (
        lambda encoder: encoder.similarity_pairwise(A, B[:3]),
        r"^a and b: rows paired one to one, got 5 and 3$",
    ),
    "SentenceEncoder(EncoderConfig, pooling=...)": (
        lambda encoder: SentenceEncoder(encoder.config, pooling="cls"),
        r"^an EncoderConfig is given alone",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_sentence_transformers_call_without_an_equivalent_is_refused_in_one_line(name, tiny_model):
    call, said = REFUSED[name]
    encoder = SentenceEncoder(tiny_model[0])
    with pytest.raises(BertWhiteningError, match=said) as refused:
        call(encoder)
    assert "\n" not in str(refused.value)
    assert encoder._encoder is None and encoder._pooled is None  # refused before the model was built


def test_a_keyword_sentence_transformers_never_had_is_pythons_type_error(tiny_model):
    encoder = SentenceEncoder(tiny_model[0])
    with pytest.raises(TypeError, match=r"^encode\(\) got an unexpected keyword argument 'normalise'$"):
        encoder.encode(A, normalise=True)
    assert encoder._encoder is None


def test_every_refused_keyword_is_in_the_table():
    """Each of `ENCODE_KEYWORDS` is refused by a row of `REFUSED` (a keyword added to the module
    without a row here would go untested)."""
    rows = " ".join(REFUSED)
    assert all("%s=" % name in rows for name in names.ENCODE_KEYWORDS)


def cosines_by_loops(queries, corpus):
    """Cosine of every pair, a dot product over the two norms, in float64."""
    queries, corpus = np.asarray(queries, dtype=np.float64), np.asarray(corpus, dtype=np.float64)
    return np.array([[q @ c / (np.linalg.norm(q) * np.linalg.norm(c)) for c in corpus] for q in queries])


def brute_force(queries, corpus, top_k):
    """Each query's ``top_k`` rows, by score from the largest, equal scores by row."""
    cosines = cosines_by_loops(queries, corpus)
    return [sorted(range(len(corpus)), key=lambda row, s=scores: (-s[row], row))[:top_k] for scores in cosines]


@pytest.mark.parametrize("rows_at_once", [65536, 3])
@pytest.mark.parametrize("top_k", [1, 4, 10, 1000])
def test_semantic_search_is_the_brute_force_of_its_cosines(top_k, rows_at_once, monkeypatch):
    monkeypatch.setattr(names, "CORPUS_ROWS_AT_ONCE", rows_at_once)  # corpus blocks merged as they come
    rng = np.random.default_rng(top_k)
    corpus = rng.normal(size=(23, 6)).astype(np.float32)
    corpus[[4, 17]] = corpus[9] * 2.0  # equal cosines: ranked by row
    queries = np.vstack([rng.normal(size=(3, 6)), corpus[9]])
    found = semantic_search(queries, corpus, top_k=top_k)
    cosines = cosines_by_loops(queries, corpus)
    assert len(found) == len(queries)
    for hits, expected, scores in zip(found, brute_force(queries, corpus, top_k), cosines, strict=True):
        assert [hit["corpus_id"] for hit in hits] == expected
        np.testing.assert_allclose([hit["score"] for hit in hits], scores[expected], atol=1e-12)
        assert all(type(hit["corpus_id"]) is int and type(hit["score"]) is float for hit in hits)
    assert [hit["corpus_id"] for hit in found[-1][:3]] == [4, 9, 17][:top_k]
    assert json.loads(json.dumps(found)) == found


@pytest.mark.parametrize(
    "queries, corpus, top_k, said",
    [
        (np.ones((2, 3)), np.ones((4, 5)), 10, r"^corpus_vectors: vectors of dimension 5, the queries' are 3$"),
        (np.ones((1, 2, 3)), np.ones((4, 3)), 10, r"^query_vectors: expected a 2-D array"),
        (np.ones((2, 3)), np.full((4, 3), np.nan), 10, r"^corpus_vectors: row 0"),
        (np.ones((2, 3)), np.ones((0, 3)), 10, r"^corpus_vectors: no vectors$"),
        (np.ones((2, 3)), np.ones((4, 3)), 0, r"top_k must be a positive integer"),
        (np.ones((2, 3)), np.array([["a", "b", "c"]]), 10, r"^corpus_vectors: holds <U1"),
    ],
)
def test_semantic_search_refuses_what_is_not_two_sets_of_vectors(queries, corpus, top_k, said):
    with pytest.raises(BertWhiteningError, match=said):
        semantic_search(queries, corpus, top_k=top_k)


def test_one_query_vector_is_one_query_as_in_sentence_transformers():
    corpus = np.random.default_rng(0).normal(size=(6, 3))
    assert semantic_search(corpus[2], corpus, top_k=2) == semantic_search(corpus[2:3], corpus, top_k=2)
    assert semantic_search(corpus[2], corpus, top_k=1)[0][0]["corpus_id"] == 2
    assert len(semantic_search(corpus[:2], corpus[4], top_k=3)[1]) == 1


def test_corpus_id_is_the_row_from_0_of_an_index_in_memory(plain):
    for result in plain[0].index(SENTENCES).search(A, top_k=len(SENTENCES)):
        for hit in result["hits"]:
            assert hit["corpus_id"] == hit["line"] - 1 and hit["text"] == SENTENCES[hit["corpus_id"]]


@pytest.fixture(scope="module")
def two_files(tiny_model, tmp_path_factory):
    """An index directory of two corpus files (written by the command), and the files' lines."""
    directory = tmp_path_factory.mktemp("corpus")
    first, second = SENTENCES[:7], SENTENCES[7:]
    paths = []
    for name, lines in (("first.txt", first), ("second.txt", second)):
        (directory / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        paths.append(str(directory / name))
    assert run("index", "--model", tiny_model[0], *paths, "--output", directory / "index") == 0
    return str(directory / "index"), paths, (first, second)


def test_corpus_id_is_line_minus_1_in_a_one_file_corpus_and_counts_across_files(tiny_model, tmp_path, two_files):
    from bert_whitening.retrieval.search import build_index, search

    one = str(tmp_path / "one")
    build_index(EncoderConfig(tiny_model[0], normalize=True), one, inputs=[two_files[1][0]])
    for result in search(one, A, top_k=100):
        assert sorted(hit["corpus_id"] for hit in result["hits"]) == list(range(7))
        assert all(hit["corpus_id"] == hit["line"] - 1 for hit in result["hits"])
    index, paths, (first, second) = two_files
    for result in search(index, A, top_k=100):
        assert sorted(hit["corpus_id"] for hit in result["hits"]) == list(range(len(SENTENCES)))
        for hit in result["hits"]:
            offset = 0 if hit["file"] == paths[0] else len(first)
            assert hit["corpus_id"] == offset + hit["line"] - 1 and hit["text"] == SENTENCES[hit["corpus_id"]]


def test_the_search_commands_json_hits_carry_corpus_id(two_files, capsys):
    index, paths, (first, second) = two_files
    capsys.readouterr()
    assert run("search", "--index", index, "--top-k", 100, "--format", "json", SENTENCES[8]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["hits"][0]["corpus_id"] == 8 and result["hits"][0]["line"] == 2  # second.txt's line 2
    assert sorted(hit["corpus_id"] for hit in result["hits"]) == list(range(len(SENTENCES)))
