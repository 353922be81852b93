"""`FusedBert`: its config and weights, and where the encoders use it. Its vectors are checked
against the numpy BERT and bert4keras' own graph for every pooling in tests/test_models.py (tiny
model) and tests/integration/test_real_model.py (all-MiniLM-L6-v2)."""

import numpy as np
import pytest

from bert_whitening import encoding, models
from bert_whitening import precision as precision_module
from bert_whitening.backend import Tokenizer, build_transformer_model, keras, tf
from bert_whitening.checkpoints import find_model
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.config import EncoderConfig
from bert_whitening.encoding import encode
from bert_whitening.layers import fused_bert
from bert_whitening.layers.fused_bert import FusedBert
from bert_whitening.models import build, build_encoder, build_encoders
from bert_whitening.names import POOLINGS

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, assert_equals_numpy_bert, random_weights
from layer_checks import assert_config_round_trip, assert_save_and_load
from reference import original_encode


def small_model(pooler):
    inputs = [keras.Input((None,), dtype="int32") for _ in range(2)]
    layer = FusedBert(
        vocab_size=10, segment_vocab_size=2, max_position=8, hidden=8, heads=2, intermediate=16, blocks=2, pooler=pooler
    )
    model = keras.Model(inputs, layer(inputs))
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(size=w.shape) for w in model.get_weights()])
    return layer, model


@pytest.mark.parametrize("pooler", [False, True])
def test_config_and_save_load_round_trip(pooler, tmp_path):
    layer, model = small_model(pooler)
    assert_config_round_trip(layer)
    ids = np.array([[2, 5, 3, 0], [2, 3, 0, 0]], dtype=np.int32)
    last = keras.Model(model.inputs, model.outputs[-1])  # the pooler's, or the last block's
    assert_save_and_load(last, [ids, np.zeros_like(ids)], tmp_path)


def test_a_padded_key_changes_nothing():
    _, model = small_model(pooler=True)
    alone = model.predict_on_batch([np.array([[2, 5, 3]]), np.zeros((1, 3))])
    padded = model.predict_on_batch([np.array([[2, 5, 3, 0, 0]]), np.zeros((1, 5))])
    np.testing.assert_allclose(padded[0][:, :3], alone[0], atol=1e-5)
    np.testing.assert_allclose(padded[2], alone[2], atol=1e-5)


@pytest.mark.parametrize("onednn", [False, True])
def test_a_training_call_packs_the_real_tokens_and_gives_the_same_outputs(monkeypatch, onednn):
    """In training the products run on the real tokens' rows alone: every block output at a real
    position and the pooler's equal the inference call's, whatever the padding (rows of
    different lengths, one padded to twice its length); padded positions come out zero."""
    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: onednn)
    _, model = small_model(pooler=True)
    ids = np.array([[2, 5, 3, 7, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0, 0, 0], [2, 9, 4, 6, 5, 3, 1, 3]], np.int32)
    segments = np.array([[0, 0, 1, 1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0], [0] * 4 + [1] * 4], np.int32)
    inference = model([ids, segments], training=False)
    trained = model([ids, segments], training=True)
    real = ids != 0
    for block in range(2):
        np.testing.assert_allclose(trained[block].numpy()[real], inference[block].numpy()[real], atol=1e-5)
        assert not trained[block].numpy()[~real].any()
    np.testing.assert_allclose(trained[2], inference[2], atol=1e-5)
    alone = model([ids[1:2, :2], segments[1:2, :2]], training=True)
    np.testing.assert_allclose(alone[2], trained[2][1:2], atol=1e-5)


@pytest.mark.parametrize("onednn", [False, True])
def test_a_served_batch_packs_when_mostly_padding_and_gives_the_same_outputs(monkeypatch, onednn):
    """In a graph traced for a server, a batch with more than `PACK_ABOVE_PADDING` of padding
    runs packed (zero at padded positions), any other batch runs every row (whatever is at
    padded positions); at real positions and in the pooler, both give the encoding call's outputs."""
    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: onednn)
    _, model = small_model(pooler=True)
    ids = np.array([[2, 5, 3, 7, 0, 0, 0, 0], [2, 3, 0, 0, 0, 0, 0, 0], [2, 9, 4, 6, 5, 3, 1, 3]], np.int32)
    segments = np.array([[0, 0, 1, 1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0], [0] * 4 + [1] * 4], np.int32)
    spec = tf.TensorSpec([None, None], tf.int32)
    with fused_bert.serving_graph():
        served = tf.function(lambda i, s: model([i, s], training=False)).get_concrete_function(spec, spec)
    branches = set()
    for rows in ([0, 1, 2], [0, 2], [2], [1]):  # padding 14/24, 4/16, none, 6/8
        batch = [ids[rows], segments[rows]]
        outputs, expected = served(*batch), model(batch, training=False)
        real = batch[0] != 0
        packed = 1 - real.mean() > fused_bert.PACK_ABOVE_PADDING
        for block in range(2):
            np.testing.assert_allclose(outputs[block].numpy()[real], expected[block].numpy()[real], atol=1e-5)
            if (~real).any():
                assert (not outputs[block].numpy()[~real].any()) == packed, rows
        np.testing.assert_allclose(outputs[2], expected[2], atol=1e-5)
        branches.add(packed)
    assert branches == {False, True}


def fused_layers(encoder):
    return [layer for layer in encoder.model.layers if isinstance(layer, FusedBert)]


def test_bert_checkpoints_run_the_fused_layer(encoders):
    for pooling, encoder in encoders.items():
        assert len(fused_layers(encoder)) == 1, pooling


@pytest.mark.parametrize("change", [{"hidden_act": "relu"}, {"residual_attention_scores": True}])
def test_a_bert_it_does_not_mirror_keeps_bert4keras_graph(tmp_path, change):
    """A ReLU feed-forward, or a key bert4keras reads that a BERT configuration does not have (here
    attention scores added from block to block), is not what `FusedBert` computes: bert4keras'
    graph is kept, and the vectors are bert4keras' own."""
    config = {**TINY_CONFIG, **change}
    directory = str(tmp_path / "other_bert")
    write_checkpoint(directory, config, random_weights(TINY_CONFIG), TINY_VOCAB)
    encoders = build_encoders(directory, poolings=POOLINGS)
    files = find_model(directory)
    bert = build_transformer_model(None, files.weights_path, with_pool="linear", **files.config)
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    for pooling, encoder in encoders.items():
        assert not fused_layers(encoder), pooling
        expected = original_encode(bert, tokenizer, SENTENCES, pooling)
        np.testing.assert_allclose(encode(encoder, SENTENCES, batch_size=4), expected, atol=1e-5, err_msg=pooling)


@pytest.mark.parametrize("pooler", [False, True])
def test_the_fused_layer_needs_the_variables_bert4keras_loads(encoders, pooler):
    """The checkpoint check of a `FusedBert` asks for exactly the variables, of the same shapes,
    that bert4keras' BERT of the configuration would load."""
    bert = fused_layers(encoders["pooler" if pooler else "cls"])[0]
    needed = models._fused_needed_variables(bert, models._checkpoint_names(bert.blocks, pooler))
    transformer = build_transformer_model(
        None, None, with_pool="linear" if pooler else False, return_keras_model=False, **TINY_CONFIG
    )
    assert needed == models._needed_variables(transformer)


@pytest.mark.parametrize("precision", [None, "float32", "auto", "bfloat16"])
def test_every_precision_builds_the_fused_layer(tiny_model, monkeypatch, precision):
    """A process that encodes, or may come to encode, in bfloat16 builds the same graph as one in
    float32: FusedBert runs bfloat16 on its own (`fused_bert.bfloat16_products`)."""
    monkeypatch.setattr(precision_module, "_process_precision", precision)
    monkeypatch.setattr(precision_module, "cpu_has_bfloat16", lambda: True)
    assert fused_layers(build_encoders(tiny_model[0], poolings=("cls",))["cls"])


def traced_dtypes(encoder, bfloat16):
    """``{op type: set of dtypes}`` of the output tensors of a new trace of ``encoder``'s model."""
    spec = tf.TensorSpec([None, None], tf.int32)
    function = encoding.compiled(keras.Model(encoder.model.inputs, encoder.model.outputs), bfloat16)
    dtypes = {}
    for op in function.get_concrete_function(spec, spec).graph.get_operations():
        dtypes.setdefault(op.type, set()).update(output.dtype for output in op.outputs)
    return dtypes


@pytest.mark.parametrize("onednn", [False, True])
def test_bfloat16_products_round_the_products_and_nothing_else(encoders, monkeypatch, onednn):
    """Every matrix product of the bfloat16 trace (the dense layers, the two attention products,
    the pooler) takes and gives bfloat16; the layer norms, the softmax, the residual sums and the
    pooling stay float32, and the float32 trace has no bfloat16 at all."""
    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: onednn)
    for pooling in ("first-last-avg", "pooler"):
        encoder = encoders[pooling]
        low = traced_dtypes(encoder, bfloat16=True)
        for product in ("MatMul", "BatchMatMulV2", "BiasAdd", "Erf"):
            assert low[product] == {tf.bfloat16}, (pooling, product)
        assert low["Softmax"] == {tf.float32}, pooling
        assert low["FusedBatchNormV3" if onednn else "Rsqrt"] == {tf.float32}, pooling
        assert tf.float32 in low["AddV2"], pooling  # the residual sums (the scores' mask is bfloat16)
        full = traced_dtypes(encoder, bfloat16=False)
        assert all(tf.bfloat16 not in dtypes for dtypes in full.values()), pooling


def test_bfloat16_vectors_are_close_to_float32_and_not_equal(encoders):
    """The bfloat16 trace runs (its vectors differ) and stays within the ``auto`` bound of float32
    on the tiny model, whose random weights amplify rounding more than a trained model's."""
    for pooling in ("first-last-avg", "cls", "pooler"):
        encoder = encoders[pooling]
        ids = np.array([encoder.tokenizer.encode(s, maxlen=encoder.maxlen)[0][:6] for s in SENTENCES[:4]], np.int32)
        segments = np.zeros_like(ids)
        exact = encoding.compiled(encoder.model)(ids, segments).numpy()
        low = encoding.compiled(encoder.model, bfloat16=True)(ids, segments).numpy()
        cosines = (exact * low).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(low, axis=1)
        assert cosines.min() >= precision_module.AUTO_MIN_COSINE, (pooling, cosines)
        assert np.abs(exact - low).max() > 1e-4, pooling


def test_an_encoder_s_graphs_hold_no_copy_of_its_weights(encoders):
    """In float32 and in bfloat16 the encoder's graph reads every weight from its variable and holds
    none as a constant: a constant weight is copied at each stage of building and optimising the
    graph, several times the model's memory (docs/performance.md, "On a CPU with AMX")."""
    spec = tf.TensorSpec([None, None], tf.int32)
    for pooling in ("first-last-avg", "pooler"):
        model = keras.Model(encoders[pooling].model.inputs, encoders[pooling].model.outputs)
        for bfloat16 in (False, True):
            concrete = encoding.compiled(model, bfloat16=bfloat16).get_concrete_function(spec, spec)
            constant_bytes = sum(
                tf.make_ndarray(op.get_attr("value")).nbytes
                for op in concrete.graph.get_operations()
                if op.type == "Const"
            )
            assert constant_bytes < 1024, (pooling, bfloat16, constant_bytes)
            read = {id(captured) for captured in concrete.captured_inputs}
            assert all(id(weight.handle) in read for weight in model.weights), (pooling, bfloat16)


def test_grappler_s_bfloat16_rewrite_runs_only_a_graph_fused_bert_does_not_cover(encoders, tmp_path, monkeypatch):
    """In bfloat16 a FusedBert rounds its own products and Grappler's rewrite (which would round
    its layer norms too) is off; bert4keras' graph (a ReLU BERT) runs under the rewrite: its
    vectors move by bfloat16's rounding (on a CPU with bfloat16), within cosine 0.99. In float32
    the rewrite is off for both, and its vectors are float32's again afterwards."""
    directory = str(tmp_path / "relu_bert")
    write_checkpoint(directory, {**TINY_CONFIG, "hidden_act": "relu"}, random_weights(TINY_CONFIG), TINY_VOCAB)
    other, fused = build_encoder(directory, pooling="first-last-avg"), encoders["first-last-avg"]
    option = encoding._MIXED_PRECISION_OPTION
    before = tf.config.optimizer.get_experimental_options().get(option, False)
    monkeypatch.setattr(encoding, "_rewrite_on", encoding._rewrite_on)
    states, vectors = [], []
    try:
        for running in ("float32", "bfloat16", "float32"):
            with precision_module.precision_scope(running):
                for name, encoder in (("fused", fused), ("other", other), ("fused", fused)):
                    encoding._graph_for(encoder.model)
                    states.append((running, name, tf.config.optimizer.get_experimental_options().get(option, False)))
                vectors.append(encode(other, SENTENCES))
    finally:
        tf.config.optimizer.set_experimental_options({option: before})
    assert states == [
        (running, name, running == "bfloat16" and name == "other")
        for running in ("float32", "bfloat16", "float32")
        for name in ("fused", "other", "fused")
    ]
    exact, rounded, again = vectors
    np.testing.assert_allclose(again, exact, atol=1e-6)
    cosines = (exact * rounded).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(rounded, axis=1)
    assert cosines.min() >= 0.99, cosines
    if precision_module.cpu_has_bfloat16():
        assert np.abs(rounded - exact).max() > 1e-4


def traced_ops(encoder):
    """The op types of a new trace of ``encoder``'s model, those of the functions it calls
    included (a serving graph's packed and padded passes are the branches of a ``tf.cond``)."""
    spec = tf.TensorSpec([None, None], tf.int32)
    function = tf.function(lambda ids, segments: encoder.model([ids, segments], training=False))
    graph = function.get_concrete_function(spec, spec).graph
    ops = {op.type for op in graph.get_operations()}
    for called in graph.as_graph_def().library.function:
        ops.update(node.op for node in called.node_def)
    return ops


@pytest.mark.parametrize("onednn", [False, True])
def test_either_layer_norm_equals_the_numpy_bert(tiny_model, monkeypatch, onednn):
    """The layer normalisation written for oneDNN's rewrite (a batch norm per row) and the plain
    one: each traced here, whichever this CPU would run, against the numpy BERT."""
    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: onednn)
    directory, weights = tiny_model
    for pooling in ("first-last-avg", "pooler"):
        encoder = build_encoder(directory, pooling=pooling)
        assert ("FusedBatchNormV3" in traced_ops(encoder)) == onednn
        assert_equals_numpy_bert(encoder, encode(encoder, SENTENCES, batch_size=5), weights, pooling)


def test_a_serving_graph_has_plain_layer_norms_within_its_block(tiny_model, monkeypatch):
    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: True)
    encoder = build_encoder(tiny_model[0], pooling="cls")
    with fused_bert.serving_graph():
        served = traced_ops(encoder)
    assert "If" in served or "StatelessIf" in served  # packed or not, decided on each batch
    assert "FusedBatchNormV3" not in served and "Rsqrt" in served
    assert "FusedBatchNormV3" in traced_ops(encoder)


def test_inference_encoders_have_no_trainable_weights(encoders, tiny_model):
    """What only encodes keeps its weights fixed; `build(config, trainable=True)` gives every
    weight of the transformer to the optimizer."""
    for pooling, encoder in encoders.items():
        assert not encoder.model.trainable_weights, pooling
    trained = build(EncoderConfig(tiny_model[0], pooling="pooler"), trainable=True)
    bert = fused_layers(trained)[0]
    assert len(trained.model.trainable_weights) == len(bert.weights) == 5 + 12 * TINY_CONFIG["num_hidden_layers"] + 2


def test_only_a_plain_bert_is_trainable(tmp_path):
    directory = str(tmp_path / "relu_bert")
    write_checkpoint(directory, {**TINY_CONFIG, "hidden_act": "relu"}, random_weights(TINY_CONFIG), TINY_VOCAB)
    with pytest.raises(models.BertWhiteningError, match="only a plain BERT can be trained, .* has hidden_act 'relu'"):
        build(EncoderConfig(directory, pooling="cls"), trainable=True)


@pytest.mark.parametrize(
    "family, change, said",
    [
        ("nezha", {}, "the nezha architecture"),
        ("bert", {"embedding_size": 16}, "key 'embedding_size', which a BERT configuration does not have"),
        ("bert", {"hidden_act": "relu"}, "hidden_act 'relu', not gelu"),
        ("bert", {"hidden_act": "gelu_erf"}, None),
    ],
)
def test_what_keeps_a_configuration_off_fused_bert_is_named(family, change, said):
    from bert_whitening.checkpoints.architecture import not_fused_because
    from bert_whitening.names import MODEL_TYPES

    assert not_fused_because(MODEL_TYPES[family], {**TINY_CONFIG, **change}) == said


def tiny_batch(encoder):
    ids = [encoder.tokenizer.encode(sentence, maxlen=encoder.maxlen)[0] for sentence in SENTENCES[:6]]
    padded = np.zeros((len(ids), max(map(len, ids))), np.int32)
    for row, sequence in enumerate(ids):
        padded[row, : len(sequence)] = sequence
    return tf.constant(padded), tf.zeros_like(padded)


@pytest.mark.parametrize("onednn", [False, True])
@pytest.mark.parametrize("pooling", ["first-last-avg", "pooler"])
def test_gradients_equal_central_differences(tiny_model, monkeypatch, onednn, pooling):
    """The gradient of a random projection of the pooled vectors, along a direction of each of
    several weights, against the central difference of the forward pass (float32: a step of
    1e-2 along a unit direction, relative 1e-2), with either layer normalisation. The direction
    is half the gradient's, half random: a random one alone is nearly orthogonal to a gradient
    of hundreds of entries, and float32's rounding of the objective would swamp its derivative."""
    monkeypatch.setattr(fused_bert, "_onednn_rewrites", lambda: onednn)
    encoder = build(EncoderConfig(tiny_model[0], pooling=pooling), trainable=True)
    ids, segments = tiny_batch(encoder)
    rng = np.random.default_rng(0)
    projection = tf.constant(rng.normal(size=(ids.shape[0], encoder.dim)).astype(np.float32))

    def objective():
        return tf.reduce_sum(encoder.model([ids, segments], training=True) * projection)

    with tf.GradientTape() as tape:
        value = objective()
    weights = {weight.name.split("/")[-1].split(":")[0]: weight for weight in encoder.model.trainable_weights}
    names = ["token_embeddings", "position_embeddings", "embedding_norm_gamma", "0_qkv_kernel", "0_qkv_bias"]
    names += ["1_attention_output_kernel", "2_intermediate_kernel", "2_output_bias", "2_output_norm_beta"]
    names += ["pooler_kernel"] if pooling == "pooler" else []
    gradients = dict(zip(names, tape.gradient(value, [weights[name] for name in names]), strict=True))
    step = 1e-2
    for name in names:
        weight = weights[name]
        original = weight.numpy()
        gradient = tf.convert_to_tensor(gradients[name]).numpy()  # token embeddings: IndexedSlices
        noise = rng.normal(size=original.shape)
        direction = gradient / np.linalg.norm(gradient) + noise / np.linalg.norm(noise)
        direction = (direction / np.linalg.norm(direction)).astype(np.float32)
        analytic = float((gradient * direction).sum())
        weight.assign(original + step * direction)
        plus = float(objective())
        weight.assign(original - step * direction)
        minus = float(objective())
        weight.assign(original)
        numeric = (plus - minus) / (2 * step)
        assert abs(analytic) > 1e-3, name  # a direction the objective depends on
        assert analytic == pytest.approx(numeric, rel=1e-2), name


def test_training_calls_run_float32_products_under_bfloat16_products(tiny_model):
    """`bfloat16_products` rounds an inference trace only: a training call traced inside it gives
    the float32 outputs, an inference call does not."""
    encoder = build(EncoderConfig(tiny_model[0], pooling="cls"), trainable=True)
    ids, segments = tiny_batch(encoder)
    exact = encoder.model([ids, segments], training=True).numpy()
    with fused_bert.bfloat16_products():
        trained = encoder.model([ids, segments], training=True).numpy()
        rounded = encoder.model([ids, segments], training=False).numpy()
    np.testing.assert_array_equal(trained, exact)
    assert np.abs(rounded - exact).max() > 1e-4


def test_segment_ids_add_their_embeddings_as_the_numpy_bert(encoders, tiny_model):
    """A sentence pair's segment ids (0 for the first, 1 for the second) add their embedding
    rows: every pooling's vector of such ids equals the numpy BERT's of the same ids and segments
    (and differs from that of all zeros)."""
    from reference import bert_hidden_states

    directory, weights = tiny_model
    tokenizer = Tokenizer(directory + "/vocab.txt", do_lower_case=True)
    ids, segments = tokenizer.encode(SENTENCES[0], SENTENCES[1])
    assert 0 < sum(segments) < len(segments)
    states = bert_hidden_states(weights, TINY_CONFIG, ids, segments)
    expected = {
        "first-last-avg": (states[0].mean(0) + states[-1].mean(0)) / 2,
        "cls": states[-1][0],
        "pooler": states[-1][0] @ weights["bert/pooler/dense/kernel"] + weights["bert/pooler/dense/bias"],
    }
    for pooling, vector in expected.items():
        model = encoders[pooling].model
        pair = model.predict_on_batch([np.array([ids], np.int32), np.array([segments], np.int32)])[0]
        np.testing.assert_allclose(pair, vector, atol=1e-5, err_msg=pooling)
        alone = model.predict_on_batch([np.array([ids], np.int32), np.zeros((1, len(ids)), np.int32)])[0]
        assert np.abs(alone - pair).max() > 1e-2, pooling
