"""`TrainOptions` and the plan made of them (`bert_whitening.training.options`): every refusal
is one line, before any work and before TensorFlow; pair files read once and hashed as read;
the memory of a step checked before training."""

import os
import re
import shutil

import pytest

from bert_whitening import training
from bert_whitening.errors import BertWhiteningError, DataError, TrainingError
from bert_whitening.losses.cosent import MAX_SCALE
from bert_whitening.training import TrainOptions, loop

from helpers import (
    TINY_CONFIG,
    TINY_VOCAB,
    bad,
    commands_in_a_fresh_process,
    quick,
    random_weights,
    run_training,
    write_pairs,
)


@pytest.mark.parametrize(
    "rows, options, message",
    [
        ([("a", "b", "1"), ("c", "d", "x")], {}, r"^{}:2: expected sentence1<TAB>sentence2<TAB>label .*'c\\td\\tx'"),
        ([("a", "b", "3"), ("c", "d", "3")], {}, r"^{}:1-2: every label is 3, one distinct label"),
        ([], {}, r"^{}: the train file holds no pairs"),
        ([("a", "b", "1"), ("c", "d", "-1")], {"loss": "softmax"}, r"^{}:2: label -1 is out of range: softmax classes"),
        (
            [("a", "b", "1.5"), ("c", "d", "2")],
            {"loss": "softmax"},
            r"^{}:1-2: every label is at or below threshold 2.5",
        ),
    ],
)
def test_bad_train_files_are_refused_in_one_line(tiny_model, tmp_path, rows, options, message):
    path = bad(tmp_path, "train.data", rows)
    with pytest.raises(DataError, match=message.format(path)) as error:
        run_training(path, str(tmp_path / "out"), model=tiny_model[0], **options)
    assert "\n" not in str(error.value)
    assert not os.path.exists(tmp_path / "out")


def test_cosent_refuses_a_batch_of_one_pair(tiny_model, pair_files, tmp_path):
    """A batch of one pair holds no two pairs to order: every step's loss was 0, and the base
    model was written as trained."""
    with pytest.raises(BertWhiteningError, match="^batch_size 1 gives CoSENT nothing to compare"):
        run_training(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], batch_size=1)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "option, value",
    [("batch_size", True), ("epochs", True), ("batch_size", 2.0), ("learning_rate", "2e-5"), ("scale", None)]
    + [("batch_size", 0), ("learning_rate", 0.0), ("scale", 0.0), ("scale", -20.0), ("threshold", "2.5")],
)
def test_an_option_of_the_wrong_type_is_refused_in_one_line(tiny_model, pair_files, tmp_path, option, value):
    """True was taken as a batch of 1 and one epoch; a str learning rate was a bare TypeError. A
    batch of 0 pairs, a rate or a scale of 0 (or below) train nothing."""
    loss = "softmax" if option in ("batch_size", "threshold") else "cosent"  # CoSENT has a check of its own
    with pytest.raises(BertWhiteningError, match="^%s %s is out of range$" % (option, re.escape(repr(value)))):
        run_training(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], loss=loss, **{option: value})
    assert os.listdir(tmp_path) == []


def test_an_unknown_loss_is_refused_naming_the_choices(tiny_model, pair_files, tmp_path):
    with pytest.raises(BertWhiteningError, match="^unknown loss 'cosine'; choose one of: cosent, softmax$"):
        run_training(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], loss="cosine")
    assert os.listdir(tmp_path) == []


def test_outputs_refused_before_any_work(tiny_model, pair_files, tmp_path):
    directory = tiny_model[0]
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(existing)
    (tmp_path / "valid").mkdir()
    valid = tmp_path / "valid" / "valid.data"  # alone in its directory: the valid file is an input too
    shutil.copy(pair_files[1], valid)
    cases = [
        (str(tmp_path / "new"), {"threshold": 2.0}, "--threshold binarises the softmax loss's labels"),
        (str(existing), {}, r"already exists; pass overwrite \(--overwrite\) to replace it"),
        (pair_files[0], {}, "cannot write .*: it is the input"),  # the train file itself: no overwrite helps
        (os.path.join(directory, "fine-tuned"), {}, "is inside the input directory"),
        (directory, {"overwrite": True}, "it is the input"),
        (os.path.dirname(directory), {"overwrite": True}, "it contains the input directory"),
        (os.path.dirname(pair_files[0]), {"overwrite": True}, "it holds the input"),
        (str(link), {"overwrite": True}, "cannot write .*: it is a symbolic link; name the directory itself"),
        (str(tmp_path / "valid"), {"overwrite": True, "valid_file": str(valid)}, "it holds the input .*valid.data"),
    ]
    for output, options, message in cases:
        with pytest.raises(BertWhiteningError, match=message):
            run_training(pair_files[0], output, model=directory, **options)
    assert (existing / "keep").read_text() == "x" and valid.read_text() == open(pair_files[1]).read()


@pytest.mark.parametrize("source", ["FIFO", "standard input", "gzip file"])
def test_a_pair_file_is_read_once_and_hashed_as_read(pair_files, tmp_path, monkeypatch, source):
    """A FIFO or standard input can be read once: the sha256 the record and the resumable state
    keep is taken on that reading (it was taken by opening the path again, which blocked on a
    FIFO and failed on ``-``). A gzip file's is of its own bytes, as ``sha256sum`` gives."""
    import contextlib
    import gzip
    import hashlib
    import pathlib
    import sys
    import threading

    open_file = None
    data = pathlib.Path(pair_files[0]).read_bytes()
    if source == "gzip file":
        path = str(tmp_path / "train.data.gz")
        with gzip.open(path, "wb") as stream:
            stream.write(data)
        expected = hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
    else:
        expected = hashlib.sha256(data).hexdigest()
        if source == "FIFO":
            path = str(tmp_path / "fifo")
            os.mkfifo(path)
        else:
            path, (read_end, write_end) = "-", os.pipe()
            open_file = os.fdopen(read_end, "r")
            monkeypatch.setattr(sys, "stdin", open_file)

        def writer(data=data):
            with contextlib.suppress(BrokenPipeError):  # the second writer's reader may close first
                with open(path, "wb") if source == "FIFO" else os.fdopen(write_end, "wb") as stream:
                    stream.write(data)

        threading.Thread(target=writer, daemon=True).start()
    pairs = training.read_pair_file(path)
    if source == "FIFO":  # what a second opening would read
        threading.Thread(target=writer, args=(b"other\tpairs\t1\n",), daemon=True).start()
    assert pairs.sha256 == expected and len(pairs.labels) == 24
    assert pairs.record()["path"] == (None if source == "standard input" else os.path.abspath(path))  # not "CWD/-"
    if source == "FIFO":  # the second writer, if still waiting for a reader, finds one and ends
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    if open_file is not None:
        open_file.close()


def test_only_a_plain_bert_is_trained(tmp_path, pair_files):
    from bert_whitening.checkpoints.google import write_checkpoint

    directory = str(tmp_path / "relu")
    write_checkpoint(directory, {**TINY_CONFIG, "hidden_act": "relu"}, random_weights(TINY_CONFIG), TINY_VOCAB)
    with pytest.raises(TrainingError, match="bert_config.json: only a plain BERT can be trained, .* hidden_act 'relu'"):
        run_training(pair_files[0], str(tmp_path / "out"), model=directory)


def test_the_command_refuses_in_one_line_before_tensorflow(tiny_model, pair_files, tmp_path):
    """Each refusal is status 1, one line, and imports no TensorFlow: options, output, model, files."""
    from bert_whitening.checkpoints.google import write_checkpoint

    relu = str(tmp_path / "relu")
    write_checkpoint(relu, {**TINY_CONFIG, "hidden_act": "relu"}, random_weights(TINY_CONFIG), TINY_VOCAB)
    one_label = write_pairs(tmp_path / "one.data", [("a", "b", 2), ("c", "d", 2)])
    existing = tmp_path / "existing"
    existing.mkdir()
    model, train = tiny_model[0], pair_files[0]
    out = str(tmp_path / "out")
    commands = [
        ["train", "--train", train, "--output", str(existing), "--model", model],
        ["train", "--train", train, "--output", os.path.join(model, "tuned"), "--model", model],
        ["train", "--train", one_label, "--output", out, "--model", model],
        ["train", "--train", train, "--valid", one_label, "--output", out, "--model", model],
        ["train", "--train", str(tmp_path / "missing.data"), "--output", out, "--model", model],
        ["train", "--train", train, "--output", out, "--model", relu],
        ["train", "--train", train, "--output", out, "--model", model, "--threshold", "2"],
        ["train", "--train", train, "--output", out, "--model", model, "--maxlen", "65"],
        ["train", "--train", train, "--output", out, "--model", model, "--scale", "1e30"],
    ]
    statuses, imported, stderr = commands_in_a_fresh_process(commands)
    assert statuses == [1] * len(commands)
    assert not imported
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == len(commands), stderr
    assert "already exists" in errors[0] and "it is inside the input directory %s" % model in errors[1]
    assert "one.data:1-2: every label is 2" in errors[2] and "the valid file has nothing" in errors[3]
    assert "missing.data: no such file" in errors[4] and "only a plain BERT" in errors[5]
    assert "--threshold binarises" in errors[6] and "maxlen 65 is larger" in errors[7]
    assert "scale 1e+30 is out of range" in errors[8] and "learning rate" not in errors[8]  # not the loss's NaN
    assert not os.path.exists(out)


def step_bytes(weights, pairs, maxlen):
    """``(activations, weights)``: what a training step of the model of ``weights``
    (TINY_CONFIG's sizes) needs at least, as `training.check_step_memory` counts it, float32:
    the largest tensors of a block per token (the feed-forward's inner layer, three hidden-wide
    tensors, a row of attention scores per head) for every block, twice (kept for the backward
    pass, and their gradients), for both sentences of each pair at maxlen; every weight but the
    pooler's four times (with its gradient and Adam's two moments)."""
    config = TINY_CONFIG
    per_token = 4 * (config["intermediate_size"] + 3 * config["hidden_size"] + config["num_attention_heads"] * maxlen)
    trained = sum(value.size for name, value in weights.items() if not name.startswith("bert/pooler/"))
    return 2 * config["num_hidden_layers"] * 2 * pairs * maxlen * per_token, 4 * 4 * trained


def test_a_training_step_is_held_to_the_memory_the_process_may_use(tiny_model, monkeypatch):
    """Counted on the pairs a step takes (no more than the file has), at maxlen."""
    from bert_whitening.checkpoints import find_model
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    files, weights = find_model(tiny_model[0]), tiny_model[1]
    limit = MemoryLimit(sum(step_bytes(weights, 8, 32)), "the {} of a test's limit")
    monkeypatch.setattr(bounded, "usable_memory", lambda: limit)
    training.check_step_memory(files, 32, 8, 24)
    training.check_step_memory(files, 32, 1000, 8)
    training.check_step_memory(files, 28, 9, 24)  # more pairs of fewer tokens
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(limit.bytes - 1, limit.source))
    with pytest.raises(TrainingError, match="a training step of 8 pairs at maxlen 32"):
        training.check_step_memory(files, 32, 8, 24)  # every weight counted: a byte less is too little
    monkeypatch.setattr(bounded, "usable_memory", lambda: limit)
    with pytest.raises(TrainingError) as raised:
        training.check_step_memory(files, 32, 9, 24)
    activations, weight_bytes = step_bytes(weights, 9, 32)
    assert str(raised.value) == (
        "--batch-size 9 (batch_size): a training step of 9 pairs at maxlen 32 needs at least %.1f GB (%.1f GB of "
        "tiny_bert's activations and their gradients, %.1f GB of weights, gradients and Adam's moments), more than "
        "%s; give a smaller batch size or maxlen"
        % ((activations + weight_bytes) / 1e9, activations / 1e9, weight_bytes / 1e9, limit)
    )


def test_a_batch_whose_training_step_cannot_fit_is_refused_before_training(
    tiny_model, pair_files, tmp_path, monkeypatch
):
    """``train --maxlen 256 --batch-size 100000`` built the model, ran 27 s and died in a
    ResourceExhaustedError traceback: the step's memory is now checked with the options."""
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(10**6, "the {} this process may address"))
    monkeypatch.setattr(loop, "_train_and_write", lambda *arguments: pytest.fail("training started"))
    output = tmp_path / "out"
    with pytest.raises(
        TrainingError, match=r"^--batch-size 1000 \(batch_size\): a training step of 24 pairs \(the whole "
    ):
        quick(tiny_model, pair_files, output, batch_size=1000, maxlen=32, epochs=1)
    assert not output.exists()


@pytest.mark.parametrize("value", [["pairs.data"], None, b"pairs.data"], ids=["list", "None", "bytes"])
@pytest.mark.parametrize("argument", ["train_file", "output", "valid_file"])
def test_sentence_encoder_train_refuses_what_is_not_a_path_naming_it(tiny_model, pair_files, tmp_path, argument, value):
    """A list, None or bytes where a path is expected was a bare TypeError from deep inside
    (``os.path``, the pair reader); it is one line naming the argument, before any work."""
    from bert_whitening import SentenceEncoder

    if argument == "valid_file" and value is None:
        pytest.skip("no valid file is a run without one")
    encoder = SentenceEncoder.load(tiny_model[0], pooling="last-avg")
    arguments = {"train_file": pair_files[0], "output": str(tmp_path / "out"), "valid_file": pair_files[1]}
    arguments[argument] = value
    with pytest.raises(
        BertWhiteningError, match=r"^%s must be a path \(str or pathlib.Path\), got " % argument
    ) as error:
        encoder.train(**arguments, epochs=0)
    assert "\n" not in str(error.value) and os.listdir(tmp_path) == []


@pytest.mark.parametrize("scale", [1e30, 1e5, MAX_SCALE * (1 + 1e-15)])
def test_a_cosent_scale_beyond_its_bound_is_refused_naming_it(tiny_model, pair_files, tmp_path, scale):
    """``--scale 1e30`` trained into a loss that was not finite, blamed on the learning rate;
    the scale is bounded by the options, which name it, before any work."""
    with pytest.raises(
        BertWhiteningError, match=r"^scale %s is out of range: CoSENT's scale is at most " % re.escape(repr(scale))
    ):
        TrainOptions(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], scale=scale)
    assert TrainOptions(pair_files[0], str(tmp_path / "out"), scale=MAX_SCALE).scale == MAX_SCALE
    assert os.listdir(tmp_path) == []


def test_train_takes_train_options_alone(tiny_model, pair_files, tmp_path):
    """`train`'s options are a `TrainOptions`: keywords or a mapping are refused in one line."""
    with pytest.raises(BertWhiteningError, match="^options must be a TrainOptions, got dict$"):
        training.train({"train_file": pair_files[0], "output": str(tmp_path / "out")})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", ["1", "true"])
def test_a_process_that_promises_frozen_weights_is_refused_training(
    tiny_model, pair_files, tmp_path, monkeypatch, value
):
    """TF_ONEDNN_ASSUME_FROZEN_WEIGHTS (set in a shell made for a server, say) lets oneDNN keep
    each product's first weights: a run trained on stale ones without a word. Refused before
    anything is read; "0" or empty is no promise."""
    from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE

    monkeypatch.setenv(FROZEN_WEIGHTS_VARIABLE, value)
    options = TrainOptions(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], epochs=1)
    with pytest.raises(TrainingError, match="^TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=%s promises .* train changes" % value):
        training.train(options)
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv(FROZEN_WEIGHTS_VARIABLE, "0")
    training.options.Plan.of(options)  # no promise: planned
