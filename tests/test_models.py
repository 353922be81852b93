"""Encoders from a real Google-format checkpoint against the numpy BERT of tests/reference.py."""

import dataclasses
import json
import logging
import os
import re
import weakref

import numpy as np
import pytest

from bert_whitening import encoding
from bert_whitening.backend import Tokenizer, build_transformer_model, load_vocab
from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.checkpoints.google import write_checkpoint
from bert_whitening.encoding import (
    encode,
    encode_together,
    token_ids,
)
from bert_whitening.errors import BertWhiteningError
from bert_whitening.models import build_encoder, build_encoders, finish, with_whitening
from bert_whitening.names import POOLINGS
from bert_whitening.precision import precision_scope, set_precision
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, assert_equals_numpy_bert, random_weights
from reference import original_encode, original_transform_and_normalize


@pytest.mark.parametrize("pooling", POOLINGS)
def test_every_pooling_equals_the_numpy_bert_reference(encoders, tiny_model, pooling):
    _, weights = tiny_model
    encoder = encoders[pooling]
    assert_equals_numpy_bert(encoder, encode(encoder, SENTENCES, batch_size=5), weights, pooling)


def test_encoders_built_together_encode_in_one_pass_as_each_alone(encoders, together, monkeypatch):
    passes = []
    run_batches = encoding._run_batches
    monkeypatch.setattr(
        encoding, "_run_batches", lambda encoder, *rest: passes.append(encoder.dim) or run_batches(encoder, *rest)
    )
    vectors = encode_together([together[pooling] for pooling in POOLINGS], SENTENCES, batch_size=5)
    assert passes == [len(POOLINGS) * TINY_CONFIG["hidden_size"]]  # one pass, every pooling
    for pooling, got in zip(POOLINGS, vectors, strict=True):  # against encoders built one by one
        np.testing.assert_allclose(got, encode(encoders[pooling], SENTENCES, batch_size=5), atol=1e-5)
    models = []
    monkeypatch.setattr(
        encoding, "_run_batches", lambda encoder, *rest: models.append(encoder.model) or run_batches(encoder, *rest)
    )
    encode_together([together[pooling] for pooling in POOLINGS], SENTENCES[:2])
    encode_together([together[pooling] for pooling in POOLINGS], SENTENCES[2:4])
    assert models[0] is models[1]  # one joint model, so one trace, however many calls


def whitened_alone(encoder):
    """``encoder`` with a whitening (k = 8) and no normalisation, on its own graph."""
    rng = np.random.default_rng(0)
    vectors = encode(encoder, SENTENCES * 4) + rng.normal(scale=0.05, size=(64, encoder.dim))
    whitening = fit_whitening(WhiteningStats().update(vectors), pooling=encoder.pooling)
    return finish(encoder, dataclasses.replace(encoder.config, whitening=whitening, n_components=8))


def test_one_encoder_encodes_together_as_itself_whitened_or_not(whitened, together):
    np.testing.assert_allclose(encode_together([whitened], SENTENCES)[0], encode(whitened, SENTENCES), atol=1e-6)
    alone = whitened_alone(together["cls"])
    np.testing.assert_allclose(encode_together([alone], SENTENCES)[0], encode(alone, SENTENCES), atol=1e-6)


def test_encoders_built_together_share_the_model_and_how_it_reads_text(tiny_model):
    """One transformer and one tokenizer serve every encoder of a `build`: configurations that
    differ in maxlen or case are refused, naming what differs, before any weights are read."""
    from bert_whitening.config import EncoderConfig
    from bert_whitening.models import build

    cls = EncoderConfig(tiny_model[0], pooling="cls")
    for change, differ in (
        (dict(maxlen=32), "maxlen"),
        (dict(lowercase=False), "lowercase"),
        (dict(maxlen=32, lowercase=False), "maxlen, lowercase"),
    ):
        with pytest.raises(
            BertWhiteningError, match="^encoders built together share one model; these differ in %s$" % differ
        ):
            build([cls, dataclasses.replace(cls, pooling="last-avg", **change)])
    with pytest.raises(BertWhiteningError, match="^no encoder to build: give at least one EncoderConfig$"):
        build([])


def test_each_set_of_poolings_gets_its_own_joint_model(encoders, together):
    """Two sets that start with the same encoder: the second's vectors are its own poolings'."""
    for second in ("last-avg", "first-last-avg", "pooler"):
        _, got = encode_together([together["cls"], together[second]], SENTENCES)
        np.testing.assert_allclose(got, encode(encoders[second], SENTENCES), atol=1e-5, err_msg=second)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_original_global_padding_procedure_gives_the_same_vectors(encoders, tiny_model, pooling):
    """The original pads every sentence to the longest of the list and pools with Keras'
    mask-aware GlobalAveragePooling1D over bert4keras' own model (tests/reference.py)."""
    files = find_model(tiny_model[0])
    bert = build_transformer_model(
        None, files.weights_path, with_pool="linear" if pooling == "pooler" else False, **files.config
    )
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    original = original_encode(bert, tokenizer, SENTENCES, pooling)
    np.testing.assert_allclose(encode(encoders[pooling], SENTENCES, batch_size=4), original, atol=1e-5)


@pytest.mark.parametrize("k", [-1, 10, 0])
@pytest.mark.parametrize("pooling", ["first-last-avg", "cls"])
def test_whitened_encoder_equals_the_numpy_pipeline(encoders, pooling, k):
    encoder = encoders[pooling]
    pooled = encode(encoder, SENTENCES * 3).astype(np.float64)
    rng = np.random.default_rng(1)
    fit_on = pooled + rng.normal(scale=0.05, size=pooled.shape)  # 48 vectors > 24 dimensions
    whitening = fit_whitening(WhiteningStats().update(fit_on), pooling=pooling)
    whitened = with_whitening(encoder, whitening, k)
    assert whitened.dim == (k if k > 0 else 24 if k < 0 else 24)
    # the whitened dimensions it keeps, as its configuration (what an export or index records) says
    assert whitened.n_components == whitened.config.components == (k if k > 0 else 24 if k < 0 else 0)
    cols = slice(None) if k < 0 else slice(0, k)
    expected = original_transform_and_normalize(
        pooled[: len(SENTENCES)], whitening.kernel[:, cols] if k else None, whitening.bias
    )
    np.testing.assert_allclose(encode(whitened, SENTENCES), expected, atol=1e-5)


def test_whitening_from_another_model_or_pooling_is_refused(encoders):
    encoder = encoders["last-avg"]
    rng = np.random.default_rng(0)
    other_size = fit_whitening(WhiteningStats().update(rng.normal(size=(100, 16))), pooling="last-avg")
    with pytest.raises(ValueError, match="dimension 16 but the model's hidden size is 24"):
        with_whitening(encoder, other_size)
    other_pooling = fit_whitening(WhiteningStats().update(rng.normal(size=(100, 24))), pooling="cls")
    with pytest.raises(ValueError, match="fitted on cls pooling, the encoder uses last-avg"):
        with_whitening(encoder, other_pooling)
    same = fit_whitening(WhiteningStats().update(rng.normal(size=(100, 24))), pooling="last-avg")
    with pytest.raises(ValueError, match="larger than the vector dimension 24"):
        with_whitening(encoder, same, 25)
    for maxlen, lowercase, encoder_reads in ((16, True, "cut at maxlen 64, lower-cased"), (64, False, "lower-cased")):
        other_text = fit_whitening(
            WhiteningStats().update(rng.normal(size=(100, 24))),
            pooling="last-avg",
            tokenization={"maxlen": maxlen, "lowercase": lowercase},
        )
        with pytest.raises(
            ValueError, match="the whitening was fitted on text cut at maxlen %d, .* %s: give" % (maxlen, encoder_reads)
        ):
            with_whitening(encoder, other_text)
    matching = {"maxlen": encoder.config.maxlen, "lowercase": encoder.config.lowercase}
    with_whitening(
        encoder,
        fit_whitening(WhiteningStats().update(rng.normal(size=(100, 24))), pooling="last-avg", tokenization=matching),
    )


def test_no_sentences_are_no_rows_of_the_encoders_dimension(encoders, whitened):
    """An empty list encodes to ``(0, dim)``, as ``np.concatenate`` of the vectors of any number
    of sentences would stack with it (a whitened encoder's dim is its k)."""
    for encoder in (encoders["first-last-avg"], whitened):
        vectors = encode(encoder, [])
        assert vectors.shape == (0, encoder.dim) and vectors.dtype == np.float32
    assert whitened.dim == 16


def test_truncation_matches_bert4keras_and_empty_sentences_are_cls_sep(encoders):
    tokenizer = encoders["cls"].tokenizer
    for sentence in SENTENCES + ["今天天气很好" * 20, "the cat is on the mat " * 30]:
        for maxlen in (2, 3, 5, 8, 64):
            ids, cut = token_ids(tokenizer, sentence, maxlen)
            assert ids == tokenizer.encode(sentence, maxlen=maxlen)[0]
            assert cut == (len(tokenizer.encode(sentence)[0]) > maxlen)
    assert token_ids(tokenizer, "", 64) == ([2, 3], False)


def test_truncated_sentences_are_counted_in_the_log(encoders, caplog):
    encoder = encoders["cls"]
    with caplog.at_level(logging.INFO, logger="bert_whitening"):
        encode(encoder, ["今天天气很好" * 20, "好", "我们在北京" * 30])
    assert "2 of 3 sentences were longer than maxlen 64 tokens" in caplog.text


def test_a_cased_encoder_reads_text_as_it_is_written(tiny_model, encoders):
    """``lowercase=False``: its tokenizer keeps the case (the vocabulary's "hello" is not
    "Hello"), and its configuration says so (an export's ``serve_text`` and a whitening's record
    read it there)."""
    cased = build_encoder(tiny_model[0], pooling="cls", lowercase=False)
    ids = load_vocab(os.path.join(tiny_model[0], "vocab.txt"))
    assert cased.config.lowercase is False and cased.lowercase is False
    assert cased.tokenizer.encode("Hello")[0] == [ids["[CLS]"], ids["[UNK]"], ids["[SEP]"]]
    assert encoders["cls"].tokenizer.encode("Hello")[0] == [ids["[CLS]"], ids["hello"], ids["[SEP]"]]


def test_model_type_is_case_insensitive(tiny_model):
    """Each family against bert4keras' model of it, from its release layout: test_model_families.py."""
    assert build_encoder(tiny_model[0], model_type="BERT", pooling="cls").model_identity["type"] == "bert"


def test_word_level_models_split_words_with_jieba(tiny_model):
    directory, _ = tiny_model
    words = build_encoder(directory, model_type="wobert", pooling="cls").tokenizer.tokenize("我们在北京")
    chars = build_encoder(directory, model_type="bert", pooling="cls").tokenizer.tokenize("我们在北京")
    assert chars == ["[CLS]", "我", "们", "在", "北", "京", "[SEP]"]
    assert words == ["[CLS]", "我们", "在", "北京", "[SEP]"]  # words of the tiny vocabulary


def test_word_level_models_cut_words_without_jieba_s_hmm(tmp_path):
    """As WoBERT's release cuts them (bert4keras' example: ``jieba.cut(s, HMM=False)``): a word
    that jieba's HMM finds and its dictionary lacks ("杭研") is cut into characters, even where
    the vocabulary holds it."""
    vocab = ["杭研" if token == "mat" else token for token in TINY_VOCAB]
    encoder = build_encoder(tiny_checkpoint(tmp_path, vocab=vocab), model_type="wobert", pooling="cls")
    assert encoder.tokenizer.tokenize("网易杭研大厦") == ["[CLS]", "网", "易", "杭", "研", "大", "厦", "[SEP]"]


@pytest.mark.parametrize("hidden_act", ["bogus", None, ["gelu"]])
def test_an_activation_bert4keras_cannot_build_is_refused_naming_the_file(model_copy, hidden_act):
    """It failed deep in bert4keras' build: an unknown name, and a missing one, with a traceback."""
    path = os.path.join(model_copy, "bert_config.json")
    with open(path) as stream:
        config = json.load(stream)
    config["hidden_act"] = hidden_act
    if hidden_act is None:
        del config["hidden_act"]
    with open(path, "w") as stream:
        json.dump(config, stream)
    said = r"bert_config.json: hidden_act is %s, not an activation bert4keras builds" % re.escape(repr(hidden_act))
    with pytest.raises(CheckpointError, match=said):
        build_encoder(str(model_copy), model_type="nezha")  # bert4keras' graph, whatever the activation


def test_vocab_size_must_match_the_config(model_copy):
    with open(os.path.join(model_copy, "vocab.txt"), "a", encoding="utf-8") as stream:
        stream.write("extra\n")
    with pytest.raises(
        CheckpointError,
        match=r"vocab.txt has %d tokens but .*bert_config.json "
        r"says vocab_size %d" % (TINY_CONFIG["vocab_size"] + 1, TINY_CONFIG["vocab_size"]),
    ):
        build_encoder(model_copy)


def test_the_tokenizer_uses_the_vocabulary_that_was_checked(tiny_model, model_copy):
    """A vocab.txt swapped between the check (`find_model`, which hashes it) and the build, as
    long and as free of repeats, is never read: ids and identity are the checked file's."""
    from bert_whitening.config import EncoderConfig
    from bert_whitening.models import build

    config = EncoderConfig(model_copy, pooling="cls")
    checked = config.files
    swapped = os.path.join(model_copy, "swapped.txt")
    with open(swapped, "w", encoding="utf-8") as stream:
        stream.write("".join(token + "\n" for token in reversed(TINY_VOCAB)))
    os.replace(swapped, os.path.join(model_copy, "vocab.txt"))
    encoder = build(config)
    ids = load_vocab(os.path.join(tiny_model[0], "vocab.txt"))  # bert4keras' reading of the checked file
    assert encoder.vocab == ids
    assert encoder.tokenizer.encode("今天")[0] == [ids["[CLS]"], ids["今"], ids["天"], ids["[SEP]"]]
    assert encoder.model_identity["vocab_sha256"] == checked.vocab_sha256 == find_model(tiny_model[0]).vocab_sha256


def test_pooler_pooling_needs_pooler_weights(tmp_path):
    directory = str(tmp_path / "no_pooler")
    write_checkpoint(directory, TINY_CONFIG, random_weights(TINY_CONFIG, with_pooler=False), TINY_VOCAB)
    build_encoder(directory, pooling="cls")  # fine without the pooler
    with pytest.raises(CheckpointError, match="bert/pooler/dense/kernel.*needs the pooler weights"):
        build_encoder(directory, pooling="pooler")
    with pytest.raises(
        CheckpointError, match="as a bert model with cls and pooler pooling: .*needs the pooler weights"
    ):
        build_encoders(directory, poolings=("cls", "pooler"))
    assert list(build_encoders(directory, poolings=("cls", "last-avg"))) == ["cls", "last-avg"]


def tiny_checkpoint(tmp_path, config=TINY_CONFIG, extra=None, vocab=TINY_VOCAB):
    """The tiny model's weights (and ``extra`` variables) under ``config``, as a Google checkpoint."""
    directory = str(tmp_path / "model")
    write_checkpoint(directory, config, {**random_weights(TINY_CONFIG), **(extra or {})}, vocab)
    return directory


@pytest.mark.parametrize("model_type", ["nezha", "roformer"])
def test_a_family_without_position_table_refuses_a_bert_checkpoint(tmp_path, model_type):
    with pytest.raises(
        CheckpointError,
        match=r"model: bert_model.ckpt does not fit bert_config.json "
        r"as a %s model with cls pooling: the model does not use "
        r"1 variable \(bert/embeddings/position_embeddings\)$" % model_type,
    ):
        build_encoder(tiny_checkpoint(tmp_path), model_type, pooling="cls")


def test_fewer_layers_in_the_config_than_in_the_checkpoint_are_refused(tmp_path):
    config = dict(TINY_CONFIG, num_hidden_layers=2)
    with pytest.raises(
        CheckpointError,
        match=r"does not use 16 variables \(bert/encoder/layer_2/"
        r"attention/output/LayerNorm/beta, .* and 13 more\)$",
    ):
        build_encoder(tiny_checkpoint(tmp_path, config))


def test_more_layers_in_the_config_than_in_the_checkpoint_are_refused(tmp_path):
    config = dict(TINY_CONFIG, num_hidden_layers=4)
    with pytest.raises(
        CheckpointError,
        match=r"model: bert_config.json gives larger sizes than bert_model.ckpt holds: "
        r"num_hidden_layers 4 \(it holds 3 layers\)$",
    ):
        build_encoder(tiny_checkpoint(tmp_path, config))


def test_shapes_that_disagree_with_the_config_are_named(tmp_path):
    config = dict(TINY_CONFIG, intermediate_size=32)  # smaller: larger is refused before the build
    with pytest.raises(
        CheckpointError,
        match=r"9 variables have another shape than the config gives "
        r"\(bert/encoder/layer_0/intermediate/dense/bias \(48,\) "
        r"instead of \(32,\), .*kernel \(24, 48\) instead of "
        r"\(24, 32\), .* and 6 more\)$",
    ):
        build_encoder(tiny_checkpoint(tmp_path, config))


def test_a_repeated_vocabulary_token_is_refused_with_its_lines(tmp_path):
    vocab = TINY_VOCAB[:-1] + ["the"]  # bert4keras would map "the" to the last line only
    with pytest.raises(
        CheckpointError,
        match=r"model/vocab.txt repeats 1 token, which bert4keras "
        r"would map to one id: 'the' on lines %d, %d$" % (TINY_VOCAB.index("the") + 1, len(TINY_VOCAB)),
    ):
        find_model(tiny_checkpoint(tmp_path, vocab=vocab))


def test_vocabulary_lines_are_counted_as_bert4keras_reads_them(tmp_path, encoders):
    """A line ends at \\n, \\r\\n or \\r only; other Unicode line breaks stay inside a line."""
    vocab = [token + "\x85\u2028" if token == "cat" else token for token in TINY_VOCAB]
    encoder = build_encoder(tiny_checkpoint(tmp_path, vocab=vocab), pooling="cls")
    assert encoder.vocab == encoders["cls"].vocab


def test_unknown_pooling_and_model_type_list_the_choices(tiny_model):
    with pytest.raises(
        ValueError, match="unknown pooling 'mean'; choose one of: first-last-avg, last-avg, cls, pooler"
    ):
        build_encoder(tiny_model[0], pooling="mean")
    with pytest.raises(ValueError, match="unknown pooling 'mean'; choose one of: first-last-avg"):
        build_encoders(tiny_model[0], poolings=("cls", "mean"))  # any of them, not only the first
    with pytest.raises(ValueError, match="poolings is empty: give at least one of first-last-avg, last-avg"):
        build_encoders(tiny_model[0], poolings=())
    with pytest.raises(ValueError, match="unknown model type 'gpt'; choose one of: bert, roberta"):
        build_encoder(tiny_model[0], model_type="gpt")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as stream:
            return {flag for line in stream if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


@pytest.mark.skipif(
    not {"avx512_bf16", "amx_bf16"} & cpu_flags(),
    reason="no avx512_bf16 or amx_bf16 in /proc/cpuinfo: oneDNN rewrites the "
    "matrix products to bfloat16 only on CPUs that have them",
)
def test_bfloat16_rounds_the_transformer_only(encoders, whitened):
    pooled = encoders["first-last-avg"]
    before = encode(pooled, SENTENCES)
    with precision_scope("bfloat16"):
        low = encode(pooled, SENTENCES)
    cosines = (before * low).sum(axis=1) / np.linalg.norm(before, axis=1) / np.linalg.norm(low, axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert np.abs(low - before).max() > 1e-4, "the bfloat16 rewrite did not run"
    kernel, bias = whitened.model.get_layer("whitening").get_weights()
    expected = low.astype(np.float64) @ kernel + bias  # whitening of the bfloat16 vectors, float64
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    with precision_scope("bfloat16"):
        np.testing.assert_allclose(encode(whitened, SENTENCES), expected, atol=1e-5)
    np.testing.assert_array_equal(encode(pooled, SENTENCES), before)  # the option is off again


def test_unknown_precision_lists_the_choices(encoders):
    with pytest.raises(ValueError, match="float32, bfloat16"):
        set_precision("float16")


@pytest.mark.parametrize("model", ["google", "huggingface"])
def test_a_fused_bert_reads_its_weights_one_at_a_time(tiny_model, tmp_path, monkeypatch, model):
    """What the load's memory check counts on: no value read is alive once its weight is assigned
    (at most the query and key kernels, when the value kernel joining them is read), where reading
    every weight first held a second copy of the whole model."""
    from bert_whitening.checkpoints import CheckedVariables

    from helpers import hf_tensors, write_hf

    directory = tiny_model[0] if model == "google" else write_hf(str(tmp_path / "hf"), hf_tensors(TINY_CONFIG))
    alive, most = [], []
    read = CheckedVariables.__getitem__

    def counted(variables, name):
        alive[:] = [value for value in alive if value() is not None]
        most.append(len(alive))
        value = read(variables, name)
        alive.append(weakref.ref(value))
        return value

    monkeypatch.setattr(CheckedVariables, "__getitem__", counted)
    build_encoder(directory, pooling="cls")
    assert len(most) == len(find_model(directory).variable_shapes) - 2  # every variable but the pooler's
    assert max(most) == 2


@pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
def test_a_checkpoint_that_could_not_be_loaded_in_memory_is_refused_before_the_build(tmp_path, monkeypatch, hidden_act):
    """Loading holds the model's float32 variables and what is read: a `FusedBert` (erf-GELU)
    reads a weight at a time, so the largest weight twice (as read and joined: the word
    embeddings, or the query, key and value kernels joined); bert4keras' graph (relu) reads
    every variable before it assigns any. At one byte less, the model is refused naming the
    limit; at the sum, it loads."""
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    config = dict(TINY_CONFIG, hidden_act=hidden_act)
    weights = random_weights(config)
    directory = str(tmp_path / "tiny")
    write_checkpoint(directory, config, weights, TINY_VOCAB)
    sizes = [4 * np.size(value) for name, value in weights.items() if not name.startswith("bert/pooler/")]
    joined = 3 * 4 * config["hidden_size"] ** 2
    needed = sum(sizes) + (2 * max(max(sizes), joined) if hidden_act == "gelu" else sum(sizes))
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed - 1, "the {} of a test"))
    refused = r"loading bert_model.ckpt needs at least .*, more than the .* of a test$"
    with pytest.raises(CheckpointError, match=refused):
        build_encoder(directory, pooling="cls")
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed, "the {} of a test"))
    assert build_encoder(directory, pooling="cls").model is not None
