"""SavedModel export: signatures, versions, atomicity, verification, saved_model_cli."""

import json
import os
import stat

import numpy as np
import pytest

from bert_whitening.backend import tf
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.encoding import encode, runs_fused_bert, tokenize
from bert_whitening.export import ExportError, ExportOptions, export_saved_model
from bert_whitening.layers import fused_bert
from bert_whitening.models import build_encoder
from bert_whitening.serving import pad_ids
from bert_whitening.vectors import l2_normalize

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, random_weights

pytestmark = pytest.mark.slow

# The tests of the session's `exported` model run in one process (`--dist loadgroup`), with
# tests/test_serving.py: the export is made once instead of once per test process.
on_the_export = pytest.mark.xdist_group("exported")


@on_the_export
def test_exports_version_1_readable_with_metadata(exported, whitened):
    base, path, difference = exported
    assert path == os.path.join(base, "1") and difference <= 1e-5
    assert os.stat(path).st_mode & stat.S_IROTH and os.stat(path).st_mode & stat.S_IXOTH
    with open(os.path.join(path, "assets", "bert_whitening.json"), encoding="utf-8") as stream:
        info = json.load(stream)
    assert info["pooling"] == "first-last-avg" and info["maxlen"] == 64
    assert info["n_components"] == 16 and info["normalize"] is True and info["note"] == "test"
    assert info["model"]["vocab_sha256"] == whitened.model_identity["vocab_sha256"]
    assert info["whitening"]["beta"] == 1.0 and info["whitening"]["count"] == 64
    assert info["signatures"] == ["serve_dimensions", "serve_text", "serve_text_dimensions", "serving_default"]
    assert info["versions"]["tensorflow"] and info["versions"]["bert4keras"] == "0.11.5"
    assert sorted(os.listdir(os.path.dirname(base))) == ["encoder"]  # no staging left


@on_the_export
def test_signatures_equal_the_keras_model_and_ignore_padding(exported, whitened):
    loaded = tf.saved_model.load(exported[1])
    serve = loaded.signatures["serving_default"]
    sequences, _ = tokenize(whitened, SENTENCES)
    ids = pad_ids(sequences)
    expected = encode(whitened, SENTENCES)
    vectors = serve(input_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))["embedding"].numpy()
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    padded = np.pad(ids, ((0, 0), (0, 7)))
    more = serve(input_ids=tf.constant(padded), segment_ids=tf.zeros_like(padded))["embedding"]
    np.testing.assert_allclose(more.numpy(), expected, atol=1e-5)
    np.testing.assert_array_equal(loaded.tokenize(tf.constant(SENTENCES)).numpy(), ids)
    texts = loaded.signatures["serve_text"](text=tf.constant(SENTENCES))["embedding"].numpy()
    np.testing.assert_allclose(texts, expected, atol=1e-5)
    assert texts.shape == (len(SENTENCES), 16) and texts.dtype == np.float32
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have the same shape"):
        serve(input_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids[:1]))  # would broadcast


def test_the_saved_model_has_plain_layer_norms_where_this_process_fuses_them(tiny_model, tmp_path, monkeypatch):
    """TF Serving's standard build runs no oneDNN rewrites, where the fused form (a batch norm per
    row) is slower than plain ops (docs/performance.md): a SavedModel is traced with those, whatever this CPU runs."""
    from tensorflow.core.protobuf import saved_model_pb2

    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: True)
    path, difference = export_saved_model(build_encoder(tiny_model[0], pooling="cls"), str(tmp_path / "encoder"))
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as stream:
        saved.ParseFromString(stream.read())
    library = saved.meta_graphs[0].graph_def.library
    ops = {node.op for function in library.function for node in function.node_def}
    assert "Rsqrt" in ops and "FusedBatchNormV3" not in ops
    assert difference <= 1e-5  # against the in-process model, which fused them


def test_a_cased_encoder_s_serve_text_keeps_the_case(tiny_model, tmp_path):
    """``serve_text`` tokenises as the encoder's bert4keras Tokenizer does, lower-casing only
    when the encoder does."""
    from bert_whitening.backend import Tokenizer

    encoder = build_encoder(tiny_model[0], pooling="cls", lowercase=False)
    path, _ = export_saved_model(encoder, str(tmp_path / "m"), ExportOptions(text=True))
    reference = Tokenizer(os.path.join(tiny_model[0], "vocab.txt"), do_lower_case=False)
    sentences = ["The CAT is on the Mat", "the cat is on the mat", "Caf\u00e9 \u00c9COLE"]
    expected = pad_ids([reference.encode(sentence, maxlen=encoder.maxlen)[0] for sentence in sentences])
    np.testing.assert_array_equal(tf.saved_model.load(path).tokenize(tf.constant(sentences)).numpy(), expected)
    assert (expected[0] != expected[1]).any()  # the case matters to these ids


def test_a_bert_on_bert4keras_graph_exports_and_serves_encodes_vectors(tmp_path):
    """A BERT that `FusedBert` does not mirror (here a ReLU feed-forward) keeps bert4keras' graph:
    its export is verified as any other and serves the vectors ``encode`` gives."""
    directory = str(tmp_path / "relu_bert")
    write_checkpoint(directory, {**TINY_CONFIG, "hidden_act": "relu"}, random_weights(TINY_CONFIG), TINY_VOCAB)
    encoder = build_encoder(directory, pooling="first-last-avg")
    assert not runs_fused_bert(encoder.model)
    path, difference = export_saved_model(encoder, str(tmp_path / "m"))
    assert difference <= 1e-5
    serve = tf.saved_model.load(path).signatures["serving_default"]
    ids = pad_ids(tokenize(encoder, SENTENCES)[0])
    served = serve(input_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))["embedding"].numpy()
    np.testing.assert_allclose(served, encode(encoder, SENTENCES), atol=1e-5)


def test_text_signature_is_refused_for_jieba_models(tiny_model):
    encoder = build_encoder(tiny_model[0], model_type="wobert", pooling="cls")
    with pytest.raises(ExportError, match="wobert: it splits words with jieba"):
        export_saved_model(encoder, "unused", ExportOptions(text=True))


CHILD_IMPORTS = """
import io, os, runpy, sys
sys.argv, sys.stdin = ["verify", "--text", str(os.getppid())], io.StringIO()
try:
    runpy.run_module("bert_whitening.export.verify", run_name="__main__")
except SystemExit as stop:
    assert "no request" in str(stop), stop
print(sorted(name for name in ("bert4keras", "tensorflow", "tensorflow_text") if name in sys.modules))
"""


def test_a_bfloat16_export_runs_the_products_in_bfloat16_and_records_it(encoders, tmp_path):
    """Its vectors are the bfloat16 graph's (not float32's), within the auto bound of float32, and
    its record says bfloat16; TF Serving's own rewrite changes nothing more in it."""
    from bert_whitening.models import with_whitening
    from bert_whitening.precision import AUTO_MIN_COSINE

    normalized = with_whitening(encoders["first-last-avg"])
    path, difference = export_saved_model(normalized, str(tmp_path / "low"), ExportOptions(precision="bfloat16"))
    assert difference <= 1e-5
    with open(os.path.join(path, "assets", "bert_whitening.json"), encoding="utf-8") as stream:
        assert json.load(stream)["precision"] == "bfloat16"
    sequences, _ = tokenize(normalized, SENTENCES)
    ids = pad_ids(sequences)
    exact = encode(normalized, SENTENCES)
    loaded = tf.saved_model.load(path)
    # The products' weights (4 dense layers of 2 weights a block) are stored in bfloat16 only.
    stored = [variable.dtype for variable in loaded.encoder_variables]
    assert stored.count(tf.bfloat16) == 8 * TINY_CONFIG["num_hidden_layers"]
    assert len(stored) == len(normalized.model.variables)
    served = loaded.signatures["serving_default"]
    low = served(input_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))["embedding"].numpy()
    assert np.abs(low - exact).max() > 1e-4  # the products ran in bfloat16
    assert (low * exact).sum(axis=1).min() >= AUTO_MIN_COSINE


def test_a_bfloat16_export_below_the_bound_or_of_another_graph_is_refused(encoders, tmp_path, monkeypatch):
    from bert_whitening import precision
    from bert_whitening.models import with_whitening

    normalized = with_whitening(encoders["cls"])
    monkeypatch.setattr(precision, "AUTO_MIN_COSINE", 1.5)
    with pytest.raises(ExportError, match="in bfloat16 a verification vector falls to cosine 0.9"):
        export_saved_model(normalized, str(tmp_path / "low"), ExportOptions(precision="bfloat16"))
    assert not os.path.exists(tmp_path / "low" / "1")
    monkeypatch.setattr("bert_whitening.config.not_fused_because", lambda family, config: "another graph")
    with pytest.raises(ExportError, match="this bert model has another graph: export it in float32"):
        export_saved_model(normalized, str(tmp_path / "low"), ExportOptions(precision="bfloat16"))
    with pytest.raises(ValueError, match="float32, bfloat16"):
        export_saved_model(normalized, str(tmp_path / "low"), ExportOptions(precision="float16"))


@on_the_export
def test_the_saved_serve_text_refuses_text_that_is_not_utf8_and_names_the_rows(exported, whitened):
    serve = tf.saved_model.load(exported[1]).signatures["serve_text"]
    rows = [b"good", b"bad \xff\xfe bytes", "\ufffd".encode(), b"overlong \xc0\x80"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not UTF-8 in rows \(counting from 0\):\] \[1 3\]"):
        serve(text=tf.constant(rows))
    valid = ["", "good", "\ufffd"]  # an empty sentence is [CLS] [SEP], as in encode
    vectors = serve(text=tf.constant(valid))["embedding"].numpy()
    np.testing.assert_allclose(vectors, encode(whitened, valid), atol=1e-5)


@on_the_export
def test_the_saved_serving_default_refuses_rows_without_tokens_and_rows_past_maxlen(exported, whitened):
    serve = tf.saved_model.load(exported[1]).signatures["serving_default"]
    ids = pad_ids(tokenize(whitened, SENTENCES[:3])[0])
    call = lambda input_ids: serve(input_ids=tf.constant(input_ids), segment_ids=tf.zeros_like(input_ids))
    assert call(np.pad(ids, ((0, 0), (0, whitened.maxlen - ids.shape[1]))))["embedding"].shape[0] == 3
    ids[1] = 0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"no token .*counting from 0:\] \[1\]"):
        call(ids)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"no token .*\[0 1\]"):
        call(np.zeros((2, 0), np.int32))
    too_long = np.pad(ids[[0]], ((0, 0), (0, whitened.maxlen + 1 - ids.shape[1])))
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the exported maxlen 64"):
        call(too_long)


@on_the_export
def test_the_saved_serving_default_refuses_ids_outside_the_vocabulary_and_segments_other_than_0(exported, whitened):
    """Ids the model's embedding tables would read wrongly: on a CPU the lookup fails with its
    own message, but on a GPU TensorFlow's gather gives zeros for an id outside the table, and a
    segment id of 1 reads a row that exists; the graph refuses both before the model runs."""
    serve = tf.saved_model.load(exported[1]).signatures["serving_default"]
    ids = pad_ids(tokenize(whitened, SENTENCES[:3])[0])
    vocab_size = len(whitened.vocab)
    call = lambda input_ids, segment_ids: serve(input_ids=tf.constant(input_ids), segment_ids=tf.constant(segment_ids))
    highest = ids.copy()
    highest[0, 1] = vocab_size - 1
    assert call(highest, np.zeros_like(ids))["embedding"].shape[0] == 3
    for bad in (vocab_size, -1, 2**31 - 1):
        wrong = ids.copy()
        wrong[2, 1] = bad
        message = r"id outside the vocabulary \[0, %d\), counting from 0:\] \[2\]" % vocab_size
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            call(wrong, np.zeros_like(ids))
    segments = np.zeros_like(ids)
    segments[1, 0] = segments[2, 3] = 1
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"segment id other than 0 .*counting from 0:\] \[1 2\]"):
        call(ids, segments)


@on_the_export
def test_the_saved_dimensions_signatures_serve_the_whitening_kept_at_d(exported, whitened, encoders):
    """At every ``d`` from 1 to k: the whitening kept at ``d`` of the pooled vectors (numpy's
    `Whitening.transform`), within the float noise of the served graph, and what the export
    serves at k cut to ``d`` and renormalised within 1e-6."""
    loaded = tf.saved_model.load(exported[1])
    ids = pad_ids(tokenize(whitened, SENTENCES)[0])
    inputs = {"input_ids": tf.constant(ids), "segment_ids": tf.zeros_like(ids)}
    at_k = loaded.signatures["serving_default"](**inputs)["embedding"].numpy()
    pooled = encode(encoders["first-last-avg"], SENTENCES)
    for d in range(1, 17):
        dimensions = tf.constant(d, tf.int32)
        served = loaded.signatures["serve_dimensions"](**inputs, dimensions=dimensions)["embedding"].numpy()
        texts = loaded.signatures["serve_text_dimensions"](text=tf.constant(SENTENCES), dimensions=dimensions)
        assert served.shape == (len(SENTENCES), d) and served.dtype == np.float32
        np.testing.assert_allclose(served, whitened.whitening.transform(pooled, n_components=d), atol=1e-5)
        np.testing.assert_allclose(served, l2_normalize(at_k[:, :d].astype(np.float64)), atol=1e-6)
        np.testing.assert_array_equal(texts["embedding"].numpy(), served)


@on_the_export
def test_the_saved_dimensions_signatures_refuse_dimensions_outside_1_to_k(exported, whitened):
    """Refused by an op of the graph, not clipped (a slice would give 16 columns for 17, none for
    0 and 15 for -1), and the ids checked as serving_default checks them."""
    loaded = tf.saved_model.load(exported[1])
    ids = pad_ids(tokenize(whitened, SENTENCES[:3])[0])
    inputs = {"input_ids": tf.constant(ids), "segment_ids": tf.zeros_like(ids)}
    for d in (0, 17, -1, 2**31 - 1):
        message = r"dimensions must be from 1 to the 16 whitened dimensions kept, got\] \[%d\]" % d
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            loaded.signatures["serve_dimensions"](**inputs, dimensions=tf.constant(d))
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            loaded.signatures["serve_text_dimensions"](text=tf.constant(SENTENCES[:3]), dimensions=tf.constant(d))
    ids[1] = 0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"no token .*counting from 0:\] \[1\]"):
        loaded.signatures["serve_dimensions"](
            input_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids), dimensions=tf.constant(4)
        )


def test_an_export_without_whitened_coordinates_has_no_dimensions_signatures(encoders, tmp_path):
    """No whitening (k = 0): the pooled coordinates are not ordered by variance."""
    from bert_whitening.models import with_whitening

    path, _ = export_saved_model(with_whitening(encoders["cls"]), str(tmp_path / "m"), ExportOptions(text=True))
    assert sorted(tf.saved_model.load(path).signatures) == ["serve_text", "serving_default"]
    with open(os.path.join(path, "assets", "bert_whitening.json"), encoding="utf-8") as stream:
        assert json.load(stream)["signatures"] == ["serve_text", "serving_default"]
