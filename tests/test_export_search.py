"""export --corpus: the serve_search signature against FAISS and numpy, and its verification; the
verification's numpy helpers."""

import json
import os

import numpy as np
import pytest

from bert_whitening.encoding import encode
from bert_whitening.export import ExportError, ExportOptions, ServingModule, export_saved_model
from bert_whitening.export.verify import mismatches, unpadded_rows
from bert_whitening.retrieval.index_directory import IndexDirectory
from bert_whitening.tokenization.token_ids import pad_ids

from helpers import SENTENCES


@pytest.fixture(scope="module")
def corpus(whitened):
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(200, whitened.dim))
    vectors = np.concatenate([encode(whitened, SENTENCES), noise / np.linalg.norm(noise, axis=1, keepdims=True)])
    return np.concatenate([vectors, vectors[:3]]).astype(np.float32)  # exact duplicates: ties


@pytest.fixture(scope="module")
def search_export(whitened, corpus, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("search") / "encoder")
    path, _ = export_saved_model(whitened, base, ExportOptions(text=True, top_k=7), corpus=corpus)
    return path


def test_serve_search_returns_the_exact_nearest_rows(search_export, whitened, corpus):
    import tensorflow_text  # noqa: F401

    from bert_whitening.backend import tf

    loaded = tf.saved_model.load(search_export)
    served = loaded.signatures["serve_search"](text=tf.constant(SENTENCES[:6]))
    ids, scores = served["ids"].numpy(), served["scores"].numpy()
    assert ids.dtype == np.int64 and scores.dtype == np.float32 and ids.shape == (6, 7)
    dots = encode(whitened, SENTENCES[:6]).astype(np.float64) @ corpus.T.astype(np.float64)
    expected = np.argsort(-dots, axis=1, kind="stable")[:, :7]
    queries = encode(whitened, SENTENCES[:6])
    assert not mismatches(ids, scores, expected, np.take_along_axis(dots, expected, 1), queries, corpus, 1e-5)[0]
    np.testing.assert_allclose(scores, np.take_along_axis(dots, expected, 1), atol=1e-5)
    assert set(ids[0, :2]) == {0, len(corpus) - 3}  # sentence 0 and its duplicate, cosine 1
    with open(os.path.join(search_export, "assets", "bert_whitening.json"), encoding="utf-8") as stream:
        assert "serve_search" in json.load(stream)["signatures"]
    assert isinstance(loaded.corpus, tf.Variable) and loaded.corpus.shape == corpus.shape
    with open(os.path.join(search_export, "saved_model.pb"), "rb") as stream:
        assert corpus[20].tobytes() not in stream.read()  # not a constant in the graph


def test_serve_search_without_text_takes_token_ids(whitened, corpus, tmp_path):
    from bert_whitening.backend import tf
    from bert_whitening.encoding import tokenize
    from bert_whitening.serving import pad_ids

    path, _ = export_saved_model(whitened, str(tmp_path / "ids"), ExportOptions(top_k=10), corpus=corpus[:5])
    ids = pad_ids(tokenize(whitened, SENTENCES[:3])[0])
    served = tf.saved_model.load(path).signatures["serve_search"](
        input_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids)
    )
    assert served["ids"].shape == (3, 5)  # top_k is capped at the corpus size, and says so
    with open(os.path.join(path, "assets", "bert_whitening.json"), encoding="utf-8") as stream:
        assert json.load(stream)["corpus"]["top_k"] == 5
    assert served["ids"].numpy()[:, 0].tolist() == [0, 1, 2]


def test_ties_are_accepted_and_other_differences_are_not():
    corpus = np.array([[1, 0], [0.6, 0.8], [0.6, 0.8], [0, 1]])
    queries = np.array([[1.0, 0.0]])
    ids, scores = np.array([[0, 1, 2]]), np.array([[1.0, 0.6, 0.6]])
    assert mismatches(np.array([[0, 2, 1]]), scores, ids, scores, queries, corpus, 1e-5) == ([], 0.0)
    found, _ = mismatches(np.array([[0, 1, 3]]), scores, ids, scores, queries, corpus, 1e-5)
    assert found == [(0, 2, 3, 2)]  # row 3's cosine is 0, not 0.6: right score, wrong id
    found, difference = mismatches(ids, np.array([[1.0, 0.6, 0.5]]), ids, scores, queries, corpus, 1e-5)
    assert found == [(0, 2, 2, 2)] and difference == pytest.approx(0.1)


def test_the_verification_runs_each_row_alone_cut_to_its_tokens():
    """``serving_default``'s second check runs each row as a batch of its own with no padding,
    which a server's graph runs unpacked; rows left with their padding would mostly run packed,
    as the padded batch does, and leave the unpacked pass unchecked."""
    sequences = [[2, 7, 3], [2, 3], [2, 9, 4, 6, 5, 8, 3], [2, 1, 1, 3]]
    rows = unpadded_rows(pad_ids(sequences))
    assert [row.tolist() for row in rows] == [[sequence] for sequence in sequences]


def test_a_wrong_serve_search_fails_verification_and_leaves_nothing(whitened, corpus, tmp_path, monkeypatch):
    from bert_whitening.backend import tf

    def farthest(self, embedding):
        scores, ids = tf.math.top_k(-tf.matmul(embedding, self.corpus, transpose_b=True), k=self.top_k)
        return {"ids": tf.cast(ids, tf.int64), "scores": -scores}

    monkeypatch.setattr(ServingModule, "_nearest", farthest)
    with pytest.raises(ExportError, match="serve_search disagrees with FAISS"):
        export_saved_model(whitened, str(tmp_path / "bad"), ExportOptions(top_k=5), corpus=corpus)
    assert [name for _, _, files in os.walk(tmp_path) for name in files] == []
    assert not (tmp_path / "bad" / "1").exists()


@pytest.mark.slow
def test_cli_export_corpus_from_an_index(tiny_model, tmp_path, caplog):
    from helpers import MANY, run

    model = tiny_model[0]
    sentences = tmp_path / "corpus.txt"
    sentences.write_text("".join(s + "\n" for s in MANY[:40]), encoding="utf-8")
    whitening, index = tmp_path / "w.npz", tmp_path / "index"
    assert run("fit", "--model", model, "--output", whitening, sentences) == 0
    assert (
        run("index", "--model", model, "--whitening", whitening, "--n-components", 8, "--output", index, sentences) == 0
    )
    assert (
        run(
            "export",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            16,
            "--corpus",
            index,
            "--output",
            tmp_path / "served",
        )
        == 1
    )
    assert "n_components: 16 vs 8" in caplog.text and "refused" in caplog.text
    assert (
        run(
            "export",
            "--model",
            model,
            "--whitening",
            whitening,
            "--n-components",
            8,
            "--text",
            "--corpus",
            index,
            "--top-k",
            4,
            "--output",
            tmp_path / "served",
        )
        == 0
    )
    with open(tmp_path / "served" / "1" / "assets" / "bert_whitening.json", encoding="utf-8") as stream:
        info = json.load(stream)
    assert info["corpus"]["count"] == 40 and info["signatures"] == [
        "serve_dimensions",
        "serve_search",
        "serve_text",
        "serve_text_dimensions",
        "serving_default",
    ]
    import tensorflow_text  # noqa: F401

    from bert_whitening.backend import tf

    served = tf.saved_model.load(str(tmp_path / "served" / "1")).signatures["serve_search"](text=tf.constant([MANY[7]]))
    assert served["ids"].numpy()[0, 0] == 7 and served["scores"].numpy()[0, 0] == pytest.approx(1, abs=1e-5)
    stored = IndexDirectory(str(index)).vectors()
    np.testing.assert_allclose(stored[7] @ stored[7], 1, atol=1e-5)
