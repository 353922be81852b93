"""Fine-tuning (`bert_whitening.training`) on the tiny model: what it writes loads back as the
encoder it trained (and as its base, after no step), bert4keras loads it, one seed gives one
result, the valid file chooses the epoch, and every refusal is one line before any work."""

import json
import logging
import os
import re
import shutil
import signal
import subprocess

import numpy as np
import pytest

from bert_whitening import training
from bert_whitening.backend import Tokenizer, build_transformer_model
from bert_whitening.checkpoints import TRAINING_FILE
from bert_whitening.config import EncoderConfig
from bert_whitening.encoding import encode
from bert_whitening.errors import BertWhiteningError, TrainingError
from bert_whitening.losses import cosent
from bert_whitening.models import build_encoder
from bert_whitening.training import loop

from helpers import (
    SENTENCES,
    TINY_CONFIG,
    checkpoint,
    launched,
    quick,
    random_pairs,
    run_training,
    state_directory,
    write_pairs,
)
from reference import original_encode


def test_zero_steps_write_the_base_bit_for_bit(tiny_model, pair_files, tmp_path):
    """Every variable of the base (the pooler too, which first-last-avg does not train), the
    vocabulary's bytes and the configuration come back unchanged; so do the vectors."""
    directory, weights = tiny_model
    output = tmp_path / "same"
    quick(tiny_model, pair_files, output, epochs=0)
    written = checkpoint(output)
    assert sorted(written) == sorted(weights)
    for name, value in weights.items():
        assert written[name].dtype == value.dtype and np.array_equal(written[name], value), name
    with open(os.path.join(directory, "vocab.txt"), "rb") as base, open(output / "vocab.txt", "rb") as copy:
        assert base.read() == copy.read()
    assert json.loads((output / "bert_config.json").read_text()) == TINY_CONFIG
    for pooling in ("first-last-avg", "pooler"):
        base, reloaded = build_encoder(directory, pooling=pooling), build_encoder(str(output), pooling=pooling)
        np.testing.assert_array_equal(encode(reloaded, SENTENCES), encode(base, SENTENCES))


@pytest.fixture(scope="module")
def trained(tiny_model, pair_files, tmp_path_factory):
    """Two epochs with cls pooling and a valid file: ``(output, result, vectors at the end)``."""
    output = tmp_path_factory.mktemp("trained") / "model"
    result = quick(tiny_model, pair_files, output, valid_file=pair_files[1], pooling="cls")
    return output, result, encode(result.encoder, SENTENCES)


def test_a_trained_model_reloads_with_its_vectors(tiny_model, trained):
    output, result, vectors = trained
    reloaded = encode(build_encoder(str(output), pooling="cls"), SENTENCES)
    np.testing.assert_allclose(reloaded, vectors, atol=1e-5)
    base = encode(build_encoder(tiny_model[0], pooling="cls"), SENTENCES)
    assert np.abs(base - vectors).max() > 1e-2  # it did train


def test_a_trained_model_used_otherwise_than_it_was_trained_is_said_once(trained, tmp_path, caplog):
    """Trained with cls pooling at maxlen 64, lower-cased: each command's defaults are the base
    model's (first-last-avg), and nothing said the vectors were not the trained ones."""
    output, _, _ = trained
    name = os.path.basename(output)
    EncoderConfig(str(output), pooling="cls").check()
    assert caplog.messages == []
    for _ in range(2):
        EncoderConfig(str(output), maxlen=16, lowercase=False).check()
    assert caplog.messages == [
        "%s was trained with pooling cls, maxlen 64, lowercase true; these vectors are made with pooling "
        "first-last-avg, maxlen 16, lowercase false" % name
    ]
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    (copy / "training.json").write_text("[]", encoding="utf-8")
    caplog.clear()
    EncoderConfig(str(copy)).check()
    assert caplog.messages == [
        "%s: not read, so the settings the model was trained under are unknown (%s: expected a JSON object, got "
        "list)" % (copy / "training.json", copy / "training.json")
    ]
    (copy / "training.json").write_text('{"hyperparameters": ["cls"], "base_model": {}}', encoding="utf-8")
    caplog.clear()
    EncoderConfig(str(copy)).check()  # fields of the wrong type: the same warning, not a TypeError
    assert len(caplog.messages) == 1 and caplog.messages[0].startswith(
        "%s: not read, so the settings the model was trained under are unknown (list indices" % (copy / "training.json")
    )


@pytest.mark.parametrize("edited", ["vocab.txt", "bert_config.json"])
def test_a_trained_model_whose_vocabulary_or_configuration_was_edited_is_refused(trained, tmp_path, edited):
    """Two lines of vocab.txt swapped, or hidden_act changed: no shape tells, and the vectors
    were silently another model's; training.json records the base's files the weights fit."""
    output, _, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    if edited == "vocab.txt":
        lines = (copy / edited).read_text(encoding="utf-8").splitlines(keepends=True)
        lines[6], lines[7] = lines[7], lines[6]
        (copy / edited).write_text("".join(lines), encoding="utf-8")
    else:
        (copy / edited).write_text(json.dumps({**TINY_CONFIG, "hidden_act": "relu"}), encoding="utf-8")
    with pytest.raises(
        BertWhiteningError,
        match=r"^%s is not the one the model was trained with \(training.json records sha256 "
        % re.escape(str(copy / edited)),
    ):
        EncoderConfig(str(copy)).check()


def test_bert4keras_loads_what_is_written(trained):
    """bert4keras' own builder and loader read the written directory (the query, key and value
    split back under their names) and give the vectors of the encoder that was trained."""
    output, result, vectors = trained
    bert = build_transformer_model(
        str(output / "bert_config.json"), str(output / "bert_model.ckpt"), with_pool="linear"
    )
    tokenizer = Tokenizer(str(output / "vocab.txt"), do_lower_case=True)
    np.testing.assert_allclose(original_encode(bert, tokenizer, SENTENCES, "cls"), vectors, atol=1e-5)


def test_the_record(tiny_model, pair_files, trained):
    output, result, _ = trained
    record = json.loads((output / TRAINING_FILE).read_text())
    assert record == json.loads(json.dumps(result.record))
    assert record["base_model"]["directory"] == os.path.abspath(tiny_model[0])
    assert record["base_model"]["hidden_size"] == TINY_CONFIG["hidden_size"]
    from bert_whitening.io.files import file_sha256

    assert record["train"]["sha256"] == file_sha256(pair_files[0]) and record["train"]["pairs"] == 24
    assert record["valid"]["sha256"] == file_sha256(pair_files[1])
    assert record["hyperparameters"]["pooling"] == "cls" and record["hyperparameters"]["learning_rate"] == 1e-3
    assert record["hyperparameters"]["scale"] == 20.0 and record["loss"] == "cosent"
    assert [entry["epoch"] for entry in record["epochs"]] == [1, 2]
    assert all(np.isfinite(entry["train_loss"]) and "valid_spearman" in entry for entry in record["epochs"])
    spearmans = [entry["valid_spearman"] for entry in record["epochs"]]
    assert record["kept_epoch"] == 1 + int(np.argmax(spearmans))
    assert record["steps_per_epoch"] == 3 and record["versions"]["bert4keras"]


def test_one_seed_one_result(tiny_model, pair_files, tmp_path):
    """The shuffle and the head come from the seed: twice the same seed, the same weights; another
    seed, others."""
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        quick(tiny_model, pair_files, tmp_path / name, seed=seed, loss="softmax", threshold=2.5)
        runs[name] = checkpoint(tmp_path / name)
    for variable, value in runs["a"].items():
        assert np.array_equal(value, runs["b"][variable]), variable
    assert any(not np.array_equal(value, runs["c"][name]) for name, value in runs["a"].items())


def test_a_kept_epoch_below_the_base_model_is_said(tiny_model, pair_files, tmp_path, monkeypatch, caplog):
    """An epoch is kept all the same (the output is a trained model), but a run that made every
    epoch worse than the base model said only which epoch it kept; one as good as the base is not
    below it."""
    for spearmans, warned in (([0.4, 0.1, 0.3], True), ([0.2, 0.1, 0.3], False), ([0.3, 0.1, 0.3], False)):
        scores = iter(spearmans)  # the base, then epochs 1-2
        monkeypatch.setattr(loop, "_valid_spearman", lambda encoder, valid, scores=scores: next(scores))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            result = quick(
                tiny_model, pair_files, tmp_path / ("base %s" % spearmans[0]), epochs=2, valid_file=pair_files[1]
            )
        assert result.record["kept_epoch"] == 2
        assert ("every epoch scored below the base model" in caplog.text) is warned, caplog.text
        if warned:
            assert "every epoch scored below the base model on the valid pairs (0.3000 against 0.4000)" in caplog.text


def test_the_best_valid_epoch_is_kept(tiny_model, pair_files, tmp_path, monkeypatch):
    """With valid Spearmans 0.1, 0.5, 0.3 the second epoch is kept: its weights are those of a
    two-epoch run of the same seed."""
    spearmans = iter([0.0, 0.1, 0.5, 0.3])  # the base, then epochs 1-3
    monkeypatch.setattr(loop, "_valid_spearman", lambda encoder, valid: next(spearmans))
    lines = []
    result = quick(tiny_model, pair_files, tmp_path / "best", epochs=3, valid_file=pair_files[1], report=lines.append)
    assert result.record["kept_epoch"] == 2 and "kept epoch 2 (valid Spearman 0.5000)" in lines
    assert lines[0] == "epoch 0 (the base model): valid Spearman 0.0000"
    assert lines[2].startswith("epoch 2/3: train loss ") and lines[2].endswith(", valid Spearman 0.5000")
    quick(tiny_model, pair_files, tmp_path / "two", epochs=2)
    best, two = checkpoint(tmp_path / "best"), checkpoint(tmp_path / "two")
    for name, value in two.items():
        assert np.array_equal(best[name], value), name


def test_softmax_trains_and_discards_its_head(tiny_model, pair_files, tmp_path):
    result = quick(tiny_model, pair_files, tmp_path / "softmax", loss="softmax", pooling="pooler")
    head = result.record["softmax_head"]
    assert head["shape"] == [3 * TINY_CONFIG["hidden_size"], 6] and head["classes"] == "integer labels as classes"
    assert not any("softmax" in name or "head" in name for name in checkpoint(tmp_path / "softmax"))
    vectors = encode(result.encoder, SENTENCES)
    np.testing.assert_allclose(
        encode(build_encoder(str(tmp_path / "softmax"), pooling="pooler"), SENTENCES), vectors, atol=1e-5
    )


def test_cosent_training_ranks_the_train_pairs_better(tiny_model, tmp_path):
    """Trained on its own pairs for a few epochs, the encoder's cosines follow their labels more
    closely than the base's did (the loss pulls the right way)."""
    path = write_pairs(tmp_path / "pairs.data", random_pairs(2, count=32))
    result = run_training(
        path,
        str(tmp_path / "out"),
        path,
        model=tiny_model[0],
        learning_rate=1e-3,
        epochs=4,
        batch_size=8,
        report=lambda line: None,
    )
    record = result.record
    losses = [entry["train_loss"] for entry in record["epochs"]]
    assert losses[-1] < losses[0]
    spearman = training.read_pair_file(path)
    base = build_encoder(tiny_model[0])
    assert loop._valid_spearman(result.encoder, spearman) > loop._valid_spearman(base, spearman) + 0.1


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_loss_that_is_not_finite_stops_and_writes_nothing(tiny_model, pair_files, tmp_path, monkeypatch, value):
    real = cosent.cosent_loss
    monkeypatch.setattr(cosent, "cosent_loss", lambda labels, cosines, scale: real(labels, cosines, scale) * 0 + value)
    with pytest.raises(TrainingError, match=r"^epoch 1, step 1: the loss is %s; stopped, nothing was written" % value):
        quick(tiny_model, pair_files, tmp_path / "nan")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("where", ["step", "write"])
def test_an_interrupt_leaves_no_directory(tiny_model, pair_files, tmp_path, monkeypatch, where, resume):
    """SIGINT (SIGTERM is raised as the same `KeyboardInterrupt` by the command) in a training
    step, or once half the directory is written: no directory, no staged one beside it; with
    ``resume``, the state once an epoch is done, and nothing before."""
    from bert_whitening.checkpoints import google

    real_write = google.write_checkpoint

    def interrupt(*args, **kwargs):
        if where == "write":
            real_write(*args, **kwargs)
        raise KeyboardInterrupt

    if where == "write":
        monkeypatch.setattr(google, "write_checkpoint", interrupt)
    else:
        monkeypatch.setattr(cosent, "cosent_loss", interrupt)
    with pytest.raises(KeyboardInterrupt):
        quick(tiny_model, pair_files, tmp_path / "model", resume=resume)
    kept = [state_directory(tmp_path / "model").name] if resume and where == "write" else []
    assert os.listdir(tmp_path) == kept


@pytest.mark.parametrize("scale", [1e38, 1e-50, None], ids=["beyond float32", "below float32", "a shift of 1e-9"])
def test_cosent_trains_on_the_labels_order_whatever_their_size(tiny_model, tmp_path, scale):
    """Labels beyond float32's range (1e39), below it (1e-50) or apart by less than its precision
    were one value, or inf, in float32: the loss saw no order, trained nothing, and the base
    model was written as trained. CoSENT compares labels alone: the same order, the same run."""
    rows = random_pairs(0)
    moved = [(a, b, repr(float(1 + 1e-9 * label if scale is None else label * scale))) for a, b, label in rows]
    trained = {}
    for name, pairs in (("plain", rows), ("moved", moved)):
        quick(tiny_model, (write_pairs(tmp_path / ("%s.data" % name), pairs),), tmp_path / name, epochs=1)
        trained[name] = checkpoint(tmp_path / name)
    for name, value in trained["plain"].items():
        np.testing.assert_array_equal(trained["moved"][name], value, err_msg=name)
    assert any(not np.array_equal(value, tiny_model[1][name]) for name, value in trained["moved"].items())


def test_overwrite_replaces_a_directory(tiny_model, pair_files, tmp_path):
    existing = tmp_path / "model"
    existing.mkdir()
    (existing / "old").write_text("x")
    quick(tiny_model, pair_files, existing, epochs=0, overwrite=True)
    assert sorted(os.listdir(existing)) == sorted(
        [
            "bert_config.json",
            "bert_model.ckpt.data-00000-of-00001",
            "bert_model.ckpt.index",
            "vocab.txt",
            "training.json",
        ]
    )
    assert sorted(os.listdir(tmp_path)) == ["model"]


@pytest.mark.parametrize("overwrite", [False, True], ids=["new output", "--overwrite"])
def test_an_output_another_run_made_meanwhile_is_kept_or_replaced_as_asked(tiny_model, pair_files, tmp_path, overwrite):
    """The output is checked at the start and taken by one rename at the end: a directory made
    at its name meanwhile (by a second run into the same output, say) is left as it is, and the
    run refused, unless it was asked to overwrite."""
    from bert_whitening.checkpoints import google

    output = tmp_path / "model"
    real_write = google.write_checkpoint

    def another_run_first(directory, *arguments):
        output.mkdir(exist_ok=True)
        (output / "theirs").write_text("x")
        return real_write(directory, *arguments)

    google.write_checkpoint = another_run_first
    try:
        if overwrite:
            quick(tiny_model, pair_files, output, epochs=0, overwrite=True)
            assert "theirs" not in os.listdir(output) and "training.json" in os.listdir(output)
        else:
            with pytest.raises(BertWhiteningError, match="model was made while this run worked"):
                quick(tiny_model, pair_files, output, epochs=0)
            assert os.listdir(output) == ["theirs"]
    finally:
        google.write_checkpoint = real_write
    assert os.listdir(tmp_path) == ["model"]


def test_sentence_encoder_train_continues_with_the_trained_model(tiny_model, pair_files, tmp_path):
    from bert_whitening import SentenceEncoder

    encoder = SentenceEncoder.load(tiny_model[0], pooling="last-avg")
    encoder.encode(SENTENCES[:1])  # the base model's Keras encoders built: not used after the training
    record = encoder.train(pair_files[0], str(tmp_path / "model"), epochs=1, learning_rate=1e-3, batch_size=8)
    assert record["hyperparameters"]["pooling"] == "last-avg" and record["kept_epoch"] == 1
    assert encoder.config.model == str(tmp_path / "model") and encoder.config.whitening is None
    expected = encode(build_encoder(str(tmp_path / "model"), pooling="last-avg"), SENTENCES)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(encoder.encode(SENTENCES), expected, atol=1e-6)


def test_the_progress_bar_shows_epoch_step_loss_and_pairs_per_second(tiny_model, pair_files, tmp_path, capsys):
    quick(tiny_model, pair_files, tmp_path / "model", epochs=1, progress=True)
    bar = capsys.readouterr().err
    assert "epoch 1/1" in bar and "step=3/3" in bar and "loss=" in bar and "pair/s" in bar


@pytest.mark.slow
@pytest.mark.parametrize("number, status, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_a_signal_during_training_leaves_no_directory(tiny_model, pair_files, tmp_path, number, status, name):
    """The command in a child, signalled once its first epoch is printed: one line, its status,
    and nothing in the output's directory, staged or not."""
    argv = ["train", "--train", pair_files[0], "--output", tmp_path / "model", "--model", tiny_model[0]]
    process = subprocess.Popen(
        launched(["-m", "bert_whitening", *argv, "--epochs", "1000", "--batch-size", "4"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout.readline().startswith(b"epoch 1/1000: train loss ")
        process.send_signal(number)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == status, stderr
    assert stderr.decode().strip().splitlines()[-1] == "ERROR: interrupted by %s; nothing was written" % name
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_the_built_in_model_round_trips_through_a_google_directory(tmp_path):
    """all-MiniLM-L6-v2 (Hugging Face format) after no step: the Google directory holds its
    tensors bit for bit under Google names, and gives its vectors exactly."""
    from bert_whitening.checkpoints import find_model

    path = write_pairs(tmp_path / "pairs.data", random_pairs(0, count=8))
    run_training(path, str(tmp_path / "minilm"), model="minilm", epochs=0, report=lambda line: None)
    base = dict(find_model("minilm").variables)
    written = checkpoint(tmp_path / "minilm")
    assert sorted(written) == sorted(base)
    for name, value in base.items():
        assert np.array_equal(written[name], value), name
    for pooling in ("first-last-avg", "pooler"):
        expected = encode(build_encoder("minilm", pooling=pooling), SENTENCES)
        np.testing.assert_array_equal(
            encode(build_encoder(str(tmp_path / "minilm"), pooling=pooling), SENTENCES), expected
        )


def reference_cls_vectors(tiny_model, sentences):
    """The numpy BERT's ``cls`` vector of each sentence (tests/reference.py), float64."""
    from reference import pooled_reference

    tokenizer = Tokenizer(os.path.join(tiny_model[0], "vocab.txt"), do_lower_case=True)
    return np.array([pooled_reference(tiny_model[1], TINY_CONFIG, tokenizer.encode(s)[0], "cls") for s in sentences])


def reference_epoch_batches(count, batch_size, seed, epochs):
    """The rows of each step of each epoch: one permutation of the pairs per epoch, drawn in
    turn from ``numpy.random.default_rng(seed)``, cut into batches, the last one short."""
    rng = np.random.default_rng(seed)
    return [
        [order[start : start + batch_size] for start in range(0, count, batch_size)]
        for order in (rng.permutation(count) for _ in range(epochs))
    ]


@pytest.mark.parametrize("loss", ["cosent", "softmax"])
def test_an_epochs_loss_is_the_mean_loss_of_its_batches_in_the_seeds_order(tiny_model, tmp_path, loss):
    """At a learning rate that leaves the weights as they were (1e-9), each epoch's train loss is
    the mean over its steps of the loss of the base model's vectors (the numpy BERT's) of each
    batch: 23 pairs in batches of 10, 10 and 3, in the order the seed draws, both sentences of
    each pair; CoSENT at the scale given, or the softmax head as the seed draws it (torch's
    start, U(+-1/sqrt(3 * dim))) on ``[u, v, |u - v|]`` of labels above 2.5."""
    from reference import numpy_cosent, numpy_softmax

    rows = random_pairs(3, count=23)
    path = write_pairs(tmp_path / "pairs.data", rows)
    options = {"scale": 7.0} if loss == "cosent" else {"threshold": 2.5}
    result = quick(
        tiny_model, (path,), tmp_path / "out", loss=loss, pooling="cls", learning_rate=1e-9, batch_size=10,
        epochs=2, seed=5, **options,
    )  # fmt: skip
    firsts = reference_cls_vectors(tiny_model, [first for first, _, _ in rows])
    seconds = reference_cls_vectors(tiny_model, [second for _, second, _ in rows])
    labels = np.array([float(label) for _, _, label in rows])
    limit = 1 / np.sqrt(3 * TINY_CONFIG["hidden_size"])
    head = np.random.default_rng(5)  # the kernel, then the bias, drawn in float32
    kernel = head.uniform(-limit, limit, (3 * TINY_CONFIG["hidden_size"], 2)).astype(np.float32).astype(np.float64)
    bias = head.uniform(-limit, limit, 2).astype(np.float32).astype(np.float64)

    def batch_loss(batch):
        u, v = firsts[batch], seconds[batch]
        if loss == "softmax":
            return numpy_softmax((labels[batch] > 2.5).astype(int), u, v, kernel, bias)
        cosines = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
        return numpy_cosent(labels[batch], cosines, scale=7.0)

    epochs = reference_epoch_batches(23, 10, seed=5, epochs=2)
    assert result.record["steps_per_epoch"] == 3
    for entry, batches in zip(result.record["epochs"], epochs, strict=True):
        assert [len(batch) for batch in batches] == [10, 10, 3]
        expected = np.mean([batch_loss(batch) for batch in batches])
        assert entry["train_loss"] == pytest.approx(expected, rel=1e-4), entry


def test_the_first_step_moves_each_weight_by_the_learning_rate(tiny_model, pair_files, tmp_path):
    """Adam's first step is ``lr * m / (sqrt(v) + eps)`` with ``m = g`` and ``v = g^2`` once
    bias-corrected: every weight with a gradient moves by the learning rate itself (less only
    where the gradient is near epsilon), whichever its sign; the pooler, untrained by ``cls``,
    stays. One step: the whole train file in one batch."""
    learning_rate = 1e-3
    quick(tiny_model, pair_files, tmp_path / "one", pooling="cls", epochs=1, batch_size=24, learning_rate=learning_rate)
    written = checkpoint(tmp_path / "one")
    moves = np.concatenate(
        [np.abs(written[name] - value).ravel() for name, value in tiny_model[1].items() if "pooler" not in name]
    )
    moved = moves[moves > 0]
    assert len(moved) > moves.size / 2
    assert moved.max() == pytest.approx(learning_rate, rel=1e-3)
    assert np.median(moved) == pytest.approx(learning_rate, rel=1e-3)
    for name in ("bert/pooler/dense/kernel", "bert/pooler/dense/bias"):
        np.testing.assert_array_equal(written[name], tiny_model[1][name])


def test_of_equal_valid_spearmans_the_first_epoch_is_kept(tiny_model, pair_files, tmp_path, monkeypatch):
    """Valid Spearmans 0.5, 0.5, 0.3: the first of the two best epochs is kept (its weights are
    those of a one-epoch run), not a later one that did no better."""
    spearmans = iter([0.0, 0.5, 0.5, 0.3])  # the base, then epochs 1-3
    monkeypatch.setattr(loop, "_valid_spearman", lambda encoder, valid: next(spearmans))
    result = quick(tiny_model, pair_files, tmp_path / "best", epochs=3, valid_file=pair_files[1])
    assert result.record["kept_epoch"] == 1
    quick(tiny_model, pair_files, tmp_path / "one", epochs=1)
    best, one = checkpoint(tmp_path / "best"), checkpoint(tmp_path / "one")
    for name, value in one.items():
        assert np.array_equal(best[name], value), name


def test_training_runs_in_float32_after_a_bfloat16_rewrite_was_left_on(tiny_model, pair_files, tmp_path):
    """Grappler's bfloat16 rewrite is the process's option: an earlier bfloat16 encoding of a
    bert4keras graph left it on, and a training step traced after it ran rounded (a run in the
    same process then differed from one in a fresh process)."""
    from bert_whitening import encoding

    quick(tiny_model, pair_files, tmp_path / "plain", epochs=1, batch_size=4)
    try:
        encoding.grappler_rewrite(True)
        quick(tiny_model, pair_files, tmp_path / "after", epochs=1, batch_size=4)
    finally:
        encoding.grappler_rewrite(False)
    plain, after = checkpoint(tmp_path / "plain"), checkpoint(tmp_path / "after")
    for name, value in plain.items():
        assert np.array_equal(value, after[name]), name
