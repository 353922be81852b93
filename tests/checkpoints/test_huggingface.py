"""Hugging Face BERT directories: read directly, converted, and checked against a numpy forward
pass written in transformers' own parameter layout (tests/reference.py, HuggingFaceNames)."""

import json
import logging
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_whitening import cli
from bert_whitening.backend import tf
from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.encoding import encode, encode_together
from bert_whitening.models import build_encoder, build_encoders
from bert_whitening.names import POOLINGS

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, assert_equals_numpy_bert, here, refused
from reference import HuggingFaceNames, bert_hidden_states


def hf_tensors(config, seed=1, prefix=""):
    """Random BertModel tensors under transformers' names, Linear weights ``(out, in)``."""
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    normal = lambda *shape: rng.normal(0.0, 0.3, shape).astype(np.float32)
    tensors = {
        "embeddings.word_embeddings.weight": normal(config["vocab_size"], hidden),
        "embeddings.position_embeddings.weight": normal(config["max_position_embeddings"], hidden),
        "embeddings.token_type_embeddings.weight": normal(config["type_vocab_size"], hidden),
        "embeddings.LayerNorm.weight": 1 + normal(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
        "embeddings.position_ids": np.arange(config["max_position_embeddings"])[None],
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": normal(hidden),
    }
    linear = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "intermediate.dense": (inner, hidden),
        "output.dense": (hidden, inner),
    }
    for layer in range(config["num_hidden_layers"]):
        for name, (out, into) in linear.items():
            tensors["encoder.layer.%d.%s.weight" % (layer, name)] = normal(out, into)
            tensors["encoder.layer.%d.%s.bias" % (layer, name)] = normal(out)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors["encoder.layer.%d.%s.weight" % (layer, name)] = 1 + normal(hidden)
            tensors["encoder.layer.%d.%s.bias" % (layer, name)] = normal(hidden)
    tensors = {prefix + name: value for name, value in tensors.items()}
    if prefix:  # a BertForMaskedLM-style file also carries heads, which are not used
        tensors["cls.predictions.bias"] = normal(config["vocab_size"])
    return tensors


def write_hf(directory, tensors, config=TINY_CONFIG, model_type="bert"):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as stream:
        json.dump({"architectures": ["BertModel"], "layer_norm_eps": 1e-12, **config, "model_type": model_type}, stream)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as stream:
        stream.write("".join(token + "\n" for token in TINY_VOCAB))
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    return directory


def google_named(tensors, blocks=TINY_CONFIG["num_hidden_layers"]):
    """The Google-named arrays a BertModel's ``tensors`` stand for, spelt out from the two layouts
    of tests/reference.py (not from the package's renaming)."""
    hf = HuggingFaceNames(tensors)
    named = {"bert/embeddings/%s_embeddings" % kind: hf.embedding(kind) for kind in ("word", "position", "token_type")}
    named["bert/embeddings/LayerNorm/gamma"], named["bert/embeddings/LayerNorm/beta"] = hf.norm(None, None)
    for layer in range(blocks):
        prefix = "bert/encoder/layer_%d/" % layer
        for where, path in (("attention", "attention/output/"), ("output", "output/")):
            named[prefix + path + "LayerNorm/gamma"], named[prefix + path + "LayerNorm/beta"] = hf.norm(layer, where)
        for part, path in (
            ("query", "attention/self/query"),
            ("key", "attention/self/key"),
            ("value", "attention/self/value"),
            ("attention_output", "attention/output/dense"),
            ("intermediate", "intermediate/dense"),
            ("output", "output/dense"),
        ):
            named[prefix + path + "/kernel"], named[prefix + path + "/bias"] = hf.dense(layer, part)
    named["bert/pooler/dense/kernel"], named["bert/pooler/dense/bias"] = hf.pooler()
    return named


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    tensors = hf_tensors(TINY_CONFIG)
    return write_hf(str(tmp_path_factory.mktemp("hf") / "tiny_hf"), tensors), tensors


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_hf_directories_load_directly_and_match_numpy(tmp_path, prefix):
    tensors = hf_tensors(TINY_CONFIG, seed=3, prefix=prefix)
    directory = write_hf(str(tmp_path / "hf"), tensors)
    encoders = build_encoders(directory, poolings=POOLINGS)
    assert {encoder.model_identity["format"] for encoder in encoders.values()} == {"huggingface"}
    params = HuggingFaceNames({name[len(prefix) :]: value for name, value in tensors.items()})
    for pooling, vectors in zip(POOLINGS, encode_together(list(encoders.values()), SENTENCES), strict=True):
        assert_equals_numpy_bert(encoders[pooling], vectors, params, pooling)


def test_hf_tensors_that_do_not_fit_the_config_are_refused(tiny_hf, tmp_path):
    """Renamed to Google names, they go through the same check as a Google checkpoint."""
    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1], dict(TINY_CONFIG, num_hidden_layers=2))
    with pytest.raises(
        CheckpointError,
        match=r"hf: model.safetensors does not fit config.json as a "
        r"bert model with cls pooling: the model does not use "
        r"16 variables \(bert/encoder/layer_2/",
    ):
        build_encoder(directory, pooling="cls")


@pytest.fixture
def tensors_never_read(monkeypatch):
    """Fail the test if the tensors of a model.safetensors are loaded: its header must do."""
    from bert_whitening.checkpoints import huggingface

    def read(path):
        raise AssertionError("the tensors of %s were read" % path)

    monkeypatch.setattr(huggingface, "variable_reader", lambda path: lambda name: read(path))


def test_hf_shapes_and_sizes_come_from_the_header_alone(tiny_hf, tmp_path, tensors_never_read):
    """The checks before a build read the shapes, Google-named and the kernels transposed, from
    the header (transformers' files carry ``__metadata__``); no weight is loaded for them."""
    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1], dict(TINY_CONFIG, intermediate_size=60000))
    path = os.path.join(directory, "model.safetensors")
    save_file(tiny_hf[1], path, metadata={"format": "pt"})
    files = find_model(directory)
    expected = {name: value.shape for name, value in google_named(load_file(path)).items()}
    assert files.variable_shapes == expected
    assert files.variable_shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == (24, 48)
    with pytest.raises(CheckpointError, match=r"intermediate_size 60000 \(bert/encoder/layer_0/intermediate"):
        files.check_sizes(absolute_positions=True)


def safetensors_file(header, data_bytes):
    """A safetensors file of ``header`` (a JSON-able value, or raw bytes) and ``data_bytes`` zeros."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + bytes(data_bytes)


def f32(shape, begin, end):
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, end]}


@pytest.mark.parametrize(
    "content, said",
    [
        (b"\x01", "1 bytes, shorter than a header"),
        ((1 << 62).to_bytes(8, "little") + b"{}", "a header of 4611686018427387904 bytes in a file of 10"),
        ((100).to_bytes(8, "little") + b"{}", "a header of 100 bytes in a file of 10"),
        (safetensors_file(b"{nope", 0), "its header is not valid JSON"),
        (safetensors_file([], 0), "its header: expected a JSON object, got list"),
        (safetensors_file({"a": f32([2], 0, 8), "b": f32([2], 4, 12)}, 12), "b overlaps a"),
        (safetensors_file({"a": f32([2], 0, 8), "b": f32([1], 12, 16)}, 16), "bytes 8 to 12 belong to no tensor"),
        (safetensors_file({"a": f32([2], 0, 8)}, 12), "bytes 8 to 12 belong to no tensor"),
        (safetensors_file({"a": f32([4], 0, 16)}, 8), "a: data_offsets [0, 16] outside the 8 bytes of data"),
        (safetensors_file({"a": f32([3], 0, 8)}, 8), "a: data_offsets [0, 8] span 8 bytes, not those of F32 [3]"),
        (safetensors_file({"a": {**f32([2], 0, 8), "dtype": "F128"}}, 8), "a has no known dtype"),
        (safetensors_file({"a": f32([-2], 0, 8)}, 8), "a: shape [-2], data_offsets [0, 8]"),
        (safetensors_file({"a": f32([2], 0, True)}, 8), "a: shape [2], data_offsets [0, True]"),
    ],
    ids=[
        "short",
        "huge header",
        "header past the end",
        "not JSON",
        "not an object",
        "overlap",
        "hole",
        "trailing bytes",
        "past the end",
        "size not dtype x shape",
        "unknown dtype",
        "negative size",
        "offset not a number",
    ],
)
def test_a_damaged_safetensors_header_is_one_line_naming_the_file(tiny_hf, tmp_path, tensors_never_read, content, said):
    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1])
    path = os.path.join(directory, "model.safetensors")
    with open(path, "wb") as stream:
        stream.write(content)
    with pytest.raises(CheckpointError) as raised:
        find_model(directory).check_sizes(absolute_positions=True)
    message = str(raised.value)
    assert message.startswith(path + ": cannot read the tensors (") and "\n" not in message
    assert said in message and message.endswith("the file is truncated or not safetensors")


def test_convert_hf_round_trips(tiny_hf, tmp_path):
    directory, tensors = tiny_hf
    out = tmp_path / "google"
    assert cli.main(["convert-hf", directory, str(out)]) == 0
    assert sorted(os.listdir(out)) == [
        "bert_config.json",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index",
        "vocab.txt",
    ]
    prefix = str(out / "bert_model.ckpt")
    np.testing.assert_array_equal(
        tf.train.load_variable(prefix, "bert/encoder/layer_1/attention/self/query/kernel"),
        tensors["encoder.layer.1.attention.self.query.weight"].T,
    )
    np.testing.assert_array_equal(
        tf.train.load_variable(prefix, "bert/embeddings/LayerNorm/gamma"), tensors["embeddings.LayerNorm.weight"]
    )
    converted_files = find_model(str(out))
    assert converted_files.format == "google" and converted_files.vocab_bytes == find_model(directory).vocab_bytes
    poolings = ("first-last-avg", "pooler")
    converted, loaded = (list(build_encoders(path, poolings=poolings).values()) for path in (str(out), directory))
    for pooling, got, expected in zip(
        poolings, encode_together(converted, SENTENCES), encode_together(loaded, SENTENCES), strict=True
    ):
        np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=pooling)
    assert cli.main(["convert-hf", directory, str(out)]) == 1  # never over an existing directory
    assert sorted(os.listdir(tmp_path)) == ["google"]


def without(key):
    return {name: value for name, value in TINY_CONFIG.items() if name != key}


def vocab_lines(lines):
    def write(directory):
        with open(os.path.join(directory, "vocab.txt"), "wb") as stream:
            stream.write(b"".join(line + b"\n" for line in lines))

    return write


def weights_replaced_by(make):
    def replace(directory):
        os.remove(os.path.join(directory, "model.safetensors"))
        make(os.path.join(directory, "model.safetensors"))

    return replace


TINY_VOCAB_LINES = [token.encode("utf-8") for token in TINY_VOCAB]


@pytest.mark.parametrize(
    "config, damage, said",
    [
        ({**TINY_CONFIG, "num_hidden_layers": 10**9}, None, "num_hidden_layers is 1000000000, expected a whole number"),
        ({**TINY_CONFIG, "hidden_size": "24"}, None, "config.json: hidden_size is '24', expected a whole number"),
        ({**TINY_CONFIG, "hidden_size": 24.0}, None, "config.json: hidden_size is 24.0, expected a whole number"),
        (without("hidden_size"), None, "config.json lacks hidden_size"),
        (without("intermediate_size"), None, "config.json lacks intermediate_size"),
        ({**TINY_CONFIG, "hidden_size": 48}, None, "config.json gives larger sizes than model.safetensors holds"),
        ({**TINY_CONFIG, "num_attention_heads": 5}, None, "hidden_size 24 is not a multiple of num_attention_heads 5"),
        ({**TINY_CONFIG, "hidden_act": "bogus"}, None, "config.json: hidden_act is 'bogus', not one of"),
        ({**TINY_CONFIG, "hidden_act": "leaky_relu"}, None, "config.json: hidden_act is 'leaky_relu', not one of"),
        (without("hidden_act"), None, "config.json: hidden_act is None, not one of"),
        ({**TINY_CONFIG, "vocab_size": 10}, None, "vocab.txt has %d tokens but" % len(TINY_VOCAB)),
        ({**TINY_CONFIG, "vocab_size": 1000}, None, "config.json says vocab_size 1000"),
        (TINY_CONFIG, vocab_lines(TINY_VOCAB_LINES[:10]), "vocab.txt has 10 tokens but"),
        (TINY_CONFIG, vocab_lines(TINY_VOCAB_LINES[:-1] + [b"[CLS]"]), "repeats 1 token"),
        (TINY_CONFIG, vocab_lines(TINY_VOCAB_LINES[:-1] + [b"\xff"]), "vocab.txt is not UTF-8 text"),
        (
            TINY_CONFIG,
            vocab_lines([b"[unused1]" if line == b"[UNK]" else line for line in TINY_VOCAB_LINES]),
            "vocab.txt lacks [UNK]: a BERT vocabulary has [UNK], [CLS], [SEP]",
        ),
        (
            TINY_CONFIG,
            vocab_lines([b"[unused1]" if line == b"[CLS]" else line for line in TINY_VOCAB_LINES]),
            "vocab.txt lacks [CLS]: ",
        ),
        (
            TINY_CONFIG,
            vocab_lines([b"[unused1]" if line == b"[SEP]" else line for line in TINY_VOCAB_LINES]),
            "vocab.txt lacks [SEP]: ",
        ),
        (
            TINY_CONFIG,
            vocab_lines(TINY_VOCAB_LINES[5:6] + TINY_VOCAB_LINES[1:5] + TINY_VOCAB_LINES[:1] + TINY_VOCAB_LINES[6:]),
            "vocab.txt: line 1 is '%s', not [PAD]: id 0 is padding" % TINY_VOCAB[5],
        ),
        (
            {**TINY_CONFIG, "vocab_size": 10},
            vocab_lines(TINY_VOCAB_LINES[:10]),
            "bert/embeddings/word_embeddings (%d, 24) instead of (10, 24)" % len(TINY_VOCAB),
        ),
        (
            {**TINY_CONFIG, "position_embedding_type": "relative_key"},
            None,
            "config.json: position_embedding_type is 'relative_key', which neither the Google format",
        ),
        ({**TINY_CONFIG, "layer_norm_eps": 1e-3}, None, "config.json: layer_norm_eps is 0.001, which neither"),
        ({**TINY_CONFIG, "is_decoder": True}, None, "config.json: is_decoder is True, which neither"),
        (TINY_CONFIG, weights_replaced_by(os.mkfifo), "model.safetensors: a FIFO, not a regular file"),
        (TINY_CONFIG, weights_replaced_by(os.mkdir), "model.safetensors: a directory, not a regular file"),
    ],
    ids=[
        "a billion layers",
        "hidden size a string",
        "hidden size a float",
        "no hidden size",
        "no intermediate size",
        "hidden size larger than the weights",
        "heads that do not divide the hidden size",
        "unknown activation",
        "activation of another slope",
        "no activation",
        "vocab_size below vocab.txt",
        "vocab_size above vocab.txt",
        "vocab.txt short",
        "repeated token",
        "vocab.txt not UTF-8",
        "no [UNK]",
        "no [CLS]",
        "no [SEP]",
        "no [PAD] first",
        "vocabulary smaller than the embedding table",
        "relative positions",
        "another LayerNorm epsilon",
        "a decoder",
        "weights a FIFO",
        "weights a directory",
    ],
)
def test_convert_hf_refuses_what_encode_refuses_before_writing(tiny_hf, tmp_path, config, damage, said):
    """convert-hf reads its input as the loaders read it: what ``encode --model`` refuses, it
    refuses in the same line, and writes nothing."""
    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1], config)
    if damage:
        damage(directory)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("hello world\n", encoding="utf-8")
    refused(here("encode", "--model", directory, "--output", tmp_path / "v.npy", sentences), said)
    refused(here("convert-hf", directory, tmp_path / "google"), said)
    assert sorted(os.listdir(tmp_path)) == ["hf", "sentences.txt"]


def test_a_safetensors_file_truncated_while_its_tensors_are_read_is_one_line(tiny_hf, tmp_path):
    """The tensors are read as they are asked for, so the file can change between two reads: cut
    short in place, it is one line naming it (a file read through a mapping killed the process
    with SIGBUS)."""
    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1])
    files = find_model(directory)
    variables = files.variables
    np.testing.assert_array_equal(
        variables["bert/encoder/layer_0/output/dense/kernel"], tiny_hf[1]["encoder.layer.0.output.dense.weight"].T
    )
    os.truncate(files.weights_path, 1000)
    with pytest.raises(CheckpointError) as raised:
        variables["bert/encoder/layer_1/output/dense/kernel"]
    message = str(raised.value)
    assert message.startswith(files.weights_path + ": cannot read the tensors (") and "\n" not in message
    assert message.endswith("the file is truncated or not safetensors")


def test_convert_hf_writes_and_builds_from_the_file_it_checked(tiny_hf, tmp_path, monkeypatch):
    """A model.safetensors replaced by another model's once convert-hf has read its first
    tensor is neither written nor built: the file stays open from the first read on, so what is
    written, and then loaded to check it, is the checked file's tensors."""
    from bert_whitening.checkpoints import convert
    from bert_whitening.checkpoints.convert import convert_hf

    directory = write_hf(str(tmp_path / "hf"), tiny_hf[1])
    other = write_hf(str(tmp_path / "other"), hf_tensors(dict(TINY_CONFIG, intermediate_size=40), seed=9))
    write = convert.write_checkpoint

    def replace_after_the_first_read(staging, config, variables, *rest):
        variables["bert/embeddings/word_embeddings"]  # noqa: B018  opens the file
        os.replace(os.path.join(other, "model.safetensors"), os.path.join(directory, "model.safetensors"))
        write(staging, config, variables, *rest)

    monkeypatch.setattr(convert, "write_checkpoint", replace_after_the_first_read)
    convert_hf(directory, str(tmp_path / "google"))
    prefix = str(tmp_path / "google" / "bert_model.ckpt")
    for name, value in google_named(tiny_hf[1]).items():
        np.testing.assert_array_equal(tf.train.load_variable(prefix, name), value, err_msg=name)


def test_convert_hf_counts_what_loading_holds_before_it_writes(tiny_hf, tmp_path, monkeypatch, tensors_never_read):
    """convert-hf writes every tensor at once (the model's size and one tensor being read), then
    loads the model from the same file to check it, a weight at a time (the variables and the
    largest weight twice, more than the write): one byte short of the load is refused before
    anything is read or written; at it, the conversion goes on (and reads the tensors, which
    this test forbids)."""
    from bert_whitening.checkpoints.convert import convert_hf
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    directory, tensors = tiny_hf
    sizes = [4 * value.size for name, value in google_named(tensors).items() if "pooler" not in name]
    needed = sum(sizes) + 2 * max(*sizes, 3 * 4 * TINY_CONFIG["hidden_size"] ** 2)
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed - 1, "the {} of a test"))
    refused = r"loading model.safetensors needs at least .*, more than the .* of a test$"
    with pytest.raises(CheckpointError, match=refused):
        convert_hf(directory, str(tmp_path / "google"))
    assert not os.path.exists(tmp_path / "google")
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed, "the {} of a test"))
    with pytest.raises(AssertionError, match="were read"):
        convert_hf(directory, str(tmp_path / "google"))


def test_convert_hf_refuses_a_google_format_directory(tiny_model, tmp_path):
    refused(here("convert-hf", tiny_model[0], tmp_path / "google"), "is a Google-format directory already")
    assert os.listdir(tmp_path) == []


def test_unsupported_directories_say_what_is_supported(tiny_hf, tmp_path):
    directory, tensors = tiny_hf
    other = write_hf(str(tmp_path / "roberta"), tensors, model_type="roberta")
    with pytest.raises(CheckpointError, match="model_type 'roberta' is not supported; only BERT"):
        find_model(other)
    os.remove(os.path.join(other, "model.safetensors"))
    open(os.path.join(other, "pytorch_model.bin"), "wb").close()
    with open(os.path.join(other, "config.json"), "w") as stream:
        json.dump({**TINY_CONFIG, "model_type": "bert"}, stream)
    with pytest.raises(CheckpointError, match="model.safetensors .*only pytorch_model.bin"):
        find_model(other)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        CheckpointError,
        match="not a model directory. Supported: Google format "
        r"\(bert_config.json.*Hugging Face BERT",
    ):
        find_model(str(empty))


def test_the_built_in_model_is_the_default_and_says_so(tmp_path, caplog):
    files = find_model(None)
    assert files.name == "all-MiniLM-L6-v2" and files.format == "huggingface"
    assert files.config["hidden_size"] == 384 and files.config["num_hidden_layers"] == 6
    assert find_model("minilm").directory == files.directory
    sentences = tmp_path / "s.txt"
    sentences.write_text("hello world\n今天天气很好\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        assert cli.main(["encode", "--pooling", "cls", "--output", str(tmp_path / "v.npy"), str(sentences)]) == 0
    assert caplog.text.count("no --model given: using the built-in all-MiniLM-L6-v2") == 1
    assert np.load(tmp_path / "v.npy").shape == (2, 384)


REAL_SENTENCES = [
    "A man is playing a guitar.",
    "The cat sits on the mat, doesn't it?",
    "Héllo wörld!",
    "今天天气很好",
    "花呗每月最低还款额，怎么计算",
    "",
    "A very long sentence " * 20,
]


@pytest.mark.slow
def test_minilm_last_avg_is_sentence_transformers_mean_pooling():
    """sentence-transformers' all-MiniLM-L6-v2 pools by the mean of the last layer over real
    tokens (its 1_Pooling config); recompute that in numpy from the published weights."""
    files = find_model("minilm")
    with open(os.path.join(files.directory, "1_Pooling", "config.json")) as stream:
        assert json.load(stream)["pooling_mode_mean_tokens"] is True
    params = HuggingFaceNames(load_file(os.path.join(files.directory, "model.safetensors")))
    encoder = build_encoder("minilm", pooling="last-avg", maxlen=128)
    vectors = encode(encoder, REAL_SENTENCES, batch_size=3)
    for sentence, vector in zip(REAL_SENTENCES, vectors, strict=True):
        ids, _ = encoder.tokenizer.encode(sentence, maxlen=128)
        expected = bert_hidden_states(params, files.config, ids)[-1].mean(axis=0)
        np.testing.assert_allclose(vector, expected, atol=1e-4, err_msg=sentence)


def test_weights_that_could_not_be_loaded_in_memory_are_refused_before_they_are_read(
    tiny_hf, tmp_path, monkeypatch, tensors_never_read
):
    """A `FusedBert` loads a weight at a time: it holds the model's float32 variables and the
    largest weight twice (as read and joined), not the whole model.safetensors. At one byte less
    than that, the model is refused from the header, naming the limit; at that, the load goes on
    (and reads the tensors, which this test forbids)."""
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    directory, tensors = tiny_hf
    sizes = [4 * value.size for name, value in google_named(tensors).items() if "pooler" not in name]
    needed = sum(sizes) + 2 * max(*sizes, 3 * 4 * TINY_CONFIG["hidden_size"] ** 2)
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed - 1, "the {} of a test"))
    refused = r"loading model.safetensors needs at least .*, more than the .* of a test$"
    with pytest.raises(CheckpointError, match=refused):
        build_encoder(directory, pooling="cls")
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(needed, "the {} of a test"))
    with pytest.raises(AssertionError, match="were read"):
        build_encoder(directory, pooling="cls")
