"""What was checked is what is used: a model directory replaced after its files were checked and
its weights digested, and before its weights are read (another directory renamed over it, or
its files renamed over one by one), gives the checked model's vectors or a one-line refusal,
for ``encode`` through the Python API and for every command that loads a model; an index or
an export records the digest of the model whose vectors it holds."""

import json
import os
import shutil

import numpy as np
import pytest

from bert_whitening import models
from bert_whitening.checkpoints import CheckpointError, find_model
from bert_whitening.checkpoints.google import write_checkpoint

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, random_weights, run, synthetic_pairs

SWAPS = ["directory renamed over", "files renamed over"]


@pytest.fixture(scope="module")
def sources(tiny_model, tmp_path_factory):
    """``(checked, other)``: the tiny model, and a model of the same configuration and
    vocabulary with other weights (nothing but the weights tells them apart)."""
    other = str(tmp_path_factory.mktemp("other") / "other_bert")
    write_checkpoint(other, TINY_CONFIG, random_weights(TINY_CONFIG, seed=7), TINY_VOCAB)
    return tiny_model[0], other


@pytest.fixture
def pair(sources, tmp_path):
    """Fresh copies of both models: the swap destroys them."""
    checked, other = (str(tmp_path / "models" / name) for name in ("bert", "other"))
    shutil.copytree(sources[0], checked)
    shutil.copytree(sources[1], other)
    return checked, other


def swap(how, model, other):
    if how == "directory renamed over":
        os.rename(model, model + ".checked")
        os.rename(other, model)
    else:
        for name in sorted(os.listdir(other)):
            os.replace(os.path.join(other, name), os.path.join(model, name))


@pytest.fixture
def replaced_after_check(monkeypatch):
    """``arm(how, model, other)``: the first model loaded afterwards has its directory swapped
    (`swap`) once its files are checked and its weights digested, before any weight is read."""
    load_transformer = models.load_transformer

    def arm(how, model, other):
        swapped = []

        def load(files, *args, **kwargs):
            if not swapped:
                assert len(files.weights_sha256) == 64  # the digest checked first
                swap(how, model, other)
                swapped.append(how)
            return load_transformer(files, *args, **kwargs)

        monkeypatch.setattr(models, "load_transformer", load)
        return swapped

    return arm


def checked_or_refused(call, expected, compare):
    """``call()`` either gives what ``expected`` is (compared by ``compare``) or is refused
    with one `CheckpointError` line."""
    try:
        found = call()
    except CheckpointError as error:
        assert "\n" not in str(error), error
        return "refused"
    compare(found, expected)
    return "checked"


def close(found, expected):
    np.testing.assert_allclose(found, expected, atol=1e-5)


@pytest.mark.parametrize("how", SWAPS)
def test_encode_through_the_python_api_reads_the_checked_weights(pair, replaced_after_check, how):
    from bert_whitening import SentenceEncoder

    model, other = pair
    expected = SentenceEncoder.load(model).encode(SENTENCES)
    assert not np.allclose(SentenceEncoder.load(other).encode(SENTENCES), expected, atol=1e-3)
    swapped = replaced_after_check(how, model, other)
    checked_or_refused(lambda: SentenceEncoder.load(model).encode(SENTENCES), expected, close)
    assert swapped == [how]


@pytest.mark.parametrize("how", SWAPS)
def test_a_model_on_bert4keras_graph_loads_the_checked_weights(tmp_path, replaced_after_check, how):
    """A configuration `FusedBert` does not compute (a ReLU feed-forward): bert4keras builds and
    loads it, from the same checked reader."""
    from bert_whitening import SentenceEncoder

    relu = {**TINY_CONFIG, "hidden_act": "relu"}
    model, other = str(tmp_path / "relu_bert"), str(tmp_path / "other_bert")
    write_checkpoint(model, relu, random_weights(TINY_CONFIG), TINY_VOCAB)
    write_checkpoint(other, relu, random_weights(TINY_CONFIG, seed=7), TINY_VOCAB)
    expected = SentenceEncoder.load(model).encode(SENTENCES)
    swapped = replaced_after_check(how, model, other)
    checked_or_refused(lambda: SentenceEncoder.load(model).encode(SENTENCES), expected, close)
    assert swapped == [how]


@pytest.mark.parametrize("how", SWAPS)
def test_a_hugging_face_directory_replaced_gives_the_checked_tensors(tmp_path, replaced_after_check, how):
    from bert_whitening import SentenceEncoder

    from helpers import hf_tensors, write_hf

    model = write_hf(str(tmp_path / "hf"), hf_tensors(TINY_CONFIG))
    other = write_hf(str(tmp_path / "other"), hf_tensors(TINY_CONFIG, seed=9))
    expected = SentenceEncoder.load(model).encode(SENTENCES)
    swapped = replaced_after_check(how, model, other)
    checked_or_refused(lambda: SentenceEncoder.load(model).encode(SENTENCES), expected, close)
    assert swapped == [how]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A corpus of sentences and a senteval_cn task over the tiny vocabulary."""
    root = tmp_path_factory.mktemp("inputs")
    pairs = synthetic_pairs(90)
    corpus = root / "corpus.txt"
    corpus.write_text("".join(a + "\n" + b + "\n" for a, b, _ in pairs[:30]), encoding="utf-8")
    (root / "SAMPLE").mkdir()
    for split, part in (("train", pairs[:30]), ("valid", pairs[30:60]), ("test", pairs[60:])):
        lines = "".join("%s\t%s\t%d\n" % pair for pair in part)
        (root / "SAMPLE" / ("SAMPLE.%s.data" % split)).write_text(lines, encoding="utf-8")
    return str(corpus), str(root)


def weights_digest(model):
    return find_model(model).weights_sha256


def encoded(output, model):
    return np.load(output)


def fitted(output, model):
    from bert_whitening.whitening import Whitening

    whitening = Whitening.load(output)
    return whitening.kernel, whitening.bias, whitening.model_identity["weights_sha256"]


def same_fit(found, expected):
    close(found[0], expected[0])
    close(found[1], expected[1])
    assert found[2] == expected[2]


def scored(output, model):
    return json.loads(open(output, encoding="utf-8").read())["tasks"]["SAMPLE"]["results"]


def same_scores(found, expected):
    def scores(results):
        return {
            (number, split): score for number, result in enumerate(results) for split, score in result["splits"].items()
        }

    assert scores(found) == pytest.approx(scores(expected))


def indexed(output, model):
    from bert_whitening.retrieval.index_directory import IndexDirectory

    index = IndexDirectory(output)
    return index.vectors(), index.metadata["model"]["weights_sha256"]


def same_vectors_and_digest(found, expected):
    close(found[0], expected[0])
    assert found[1] == expected[1]


#: command -> (its arguments after ``--model M``, the output's name, what of it is compared, how)
COMMANDS = {
    "encode": (lambda corpus, task: [corpus], "v.npy", encoded, close),
    "fit": (lambda corpus, task: [corpus], "w.npz", fitted, same_fit),
    "eval": (
        lambda corpus, task: ["--task", "SAMPLE", "--data-dir", task, "--n-components", "0,8", "--json"],
        "r.json",
        scored,
        same_scores,
    ),
    "index": (lambda corpus, task: [corpus], "index", indexed, same_vectors_and_digest),
}


def command_line(command, model, inputs, output):
    arguments, _, _, _ = COMMANDS[command]
    argv = [command, "--model", model] + arguments(*inputs)
    return argv + [output] if argv[-1] == "--json" else argv[:-1] + ["--output", output, argv[-1]]


@pytest.mark.parametrize("how", SWAPS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_uses_the_checked_model_or_refuses(pair, inputs, tmp_path, replaced_after_check, command, how):
    model, other = pair
    _, name, read, compare = COMMANDS[command]
    reference = str(tmp_path / ("reference-" + name))
    assert run(*command_line(command, model, inputs, reference)) == 0
    expected = read(reference, model)
    digest = weights_digest(model)
    swapped = replaced_after_check(how, model, other)
    output = str(tmp_path / name)
    status = run(*command_line(command, model, inputs, output))
    assert swapped == [how]
    if status == 0:
        compare(read(output, model), expected)
    else:
        assert status == 1 and not os.path.exists(output)
    if command == "index" and status == 0:
        assert read(output, model)[1] == digest


@pytest.mark.slow  # the export's verification runs in a process of its own
@pytest.mark.parametrize("how", SWAPS)
def test_an_export_holds_and_records_the_checked_model(pair, tmp_path, replaced_after_check, how):
    from bert_whitening import SentenceEncoder
    from bert_whitening.backend import tf

    model, other = pair
    expected = SentenceEncoder.load(model).encode(SENTENCES)
    digest = weights_digest(model)
    swapped = replaced_after_check(how, model, other)
    base = tmp_path / "served"
    status = run("export", "--model", model, "--text", "--output", base)
    assert swapped == [how]
    if status:
        assert status == 1 and not base.exists()
        return
    (version,) = os.listdir(base)
    record = json.loads((base / version / "assets" / "bert_whitening.json").read_text(encoding="utf-8"))
    assert record["model"]["weights_sha256"] == digest
    served = tf.saved_model.load(str(base / version)).signatures["serve_text"]
    close(served(text=tf.constant(SENTENCES))["embedding"].numpy(), expected)
