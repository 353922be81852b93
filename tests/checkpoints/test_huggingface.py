"""Hugging Face BERT directories: read directly, converted, and checked against a numpy forward
pass written in transformers' own parameter layout (tests/reference.py, HuggingFaceNames)."""

import json
import logging
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_whitening import cli
from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.encoding import encode, encode_together
from bert_whitening.models import build_encoder, build_encoders
from bert_whitening.names import POOLINGS

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, assert_equals_numpy_bert, hf_tensors, write_hf
from reference import HuggingFaceNames, bert_hidden_states


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


TINY_VOCAB_LINES = [token.encode("utf-8") for token in TINY_VOCAB]


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
    with caplog.at_level(logging.DEBUG):
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
