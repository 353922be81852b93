"""`convert-hf` from the command line: round trip and the refusals `encode` shares."""

import os

import numpy as np
import pytest
from checkpoints.test_huggingface import TINY_VOCAB_LINES

from bert_whitening import cli
from bert_whitening.backend import tf
from bert_whitening.checkpoints import find_model
from bert_whitening.encoding import encode_together
from bert_whitening.models import build_encoders

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, here, refused, write_hf


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


def test_convert_hf_refuses_a_google_format_directory(tiny_model, tmp_path):
    refused(here("convert-hf", tiny_model[0], tmp_path / "google"), "is a Google-format directory already")
    assert os.listdir(tmp_path) == []
