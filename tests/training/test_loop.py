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
from bert_whitening.backend import Tokenizer, build_transformer_model, tf
from bert_whitening.config import EncoderConfig
from bert_whitening.encoding import encode
from bert_whitening.errors import BertWhiteningError, DataError, TrainingError
from bert_whitening.models import build_encoder

from helpers import SENTENCES, TINY_CONFIG, TINY_VOCAB, commands_in_a_fresh_process, launched, random_weights, run
from reference import original_encode


def write_pairs(path, rows):
    with open(path, "w", encoding="utf-8") as stream:
        stream.writelines("%s\t%s\t%s\n" % row for row in rows)
    return str(path)


def random_pairs(seed, count=24, labels=(0, 1, 2, 3, 4, 5)):
    rng = np.random.default_rng(seed)
    return [
        (SENTENCES[rng.integers(len(SENTENCES))], SENTENCES[rng.integers(len(SENTENCES))], rng.choice(labels))
        for _ in range(count)
    ]


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pairs")
    return write_pairs(directory / "train.data", random_pairs(0)), write_pairs(
        directory / "valid.data", random_pairs(1)
    )


def quick(tiny_model, pair_files, output, **options):
    """`training.train` on the tiny model with a learning rate that moves its weights in a few steps."""
    options = {"learning_rate": 1e-3, "epochs": 2, "batch_size": 8, "report": lambda line: None, **options}
    return training.train(pair_files[0], str(output), model=tiny_model[0], **options)


def checkpoint(directory):
    reader = tf.train.load_checkpoint(os.path.join(directory, "bert_model.ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


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
    record = json.loads((output / training.TRAINING_FILE).read_text())
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
        monkeypatch.setattr(training, "_valid_spearman", lambda encoder, valid, scores=scores: next(scores))
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
    monkeypatch.setattr(training, "_valid_spearman", lambda encoder, valid: next(spearmans))
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
    result = training.train(
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
    assert training._valid_spearman(result.encoder, spearman) > training._valid_spearman(base, spearman) + 0.1


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_loss_that_is_not_finite_stops_and_writes_nothing(tiny_model, pair_files, tmp_path, monkeypatch, value):
    from bert_whitening import losses

    real = losses.cosent_loss
    monkeypatch.setattr(losses, "cosent_loss", lambda labels, cosines, scale: real(labels, cosines, scale) * 0 + value)
    with pytest.raises(TrainingError, match=r"^epoch 1, step 1: the loss is %s; stopped, nothing was written" % value):
        quick(tiny_model, pair_files, tmp_path / "nan")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("where", ["step", "write"])
def test_an_interrupt_leaves_no_directory(tiny_model, pair_files, tmp_path, monkeypatch, where, resume):
    """SIGINT (SIGTERM is raised as the same `KeyboardInterrupt` by the command) in a training
    step, or once half the directory is written: no directory, no staged one beside it; with
    ``resume``, the state once an epoch is done, and nothing before."""
    from bert_whitening import losses
    from bert_whitening.checkpoints import google

    real_write = google.write_checkpoint

    def interrupt(*args, **kwargs):
        if where == "write":
            real_write(*args, **kwargs)
        raise KeyboardInterrupt

    if where == "write":
        monkeypatch.setattr(google, "write_checkpoint", interrupt)
    else:
        monkeypatch.setattr(losses, "cosent_loss", interrupt)
    with pytest.raises(KeyboardInterrupt):
        quick(tiny_model, pair_files, tmp_path / "model", resume=resume)
    kept = [state_directory(tmp_path / "model").name] if resume and where == "write" else []
    assert os.listdir(tmp_path) == kept


def stop_in_epoch(monkeypatch, epoch, how=None):
    """Make the run stop at the second step of ``epoch``, once its first step has moved the
    weights and Adam's moments in memory: ``how()`` gives that step's loss (default: SIGINT's
    `KeyboardInterrupt`)."""
    real = training._epoch

    def interrupt():
        raise KeyboardInterrupt

    def epoch_that_stops(o, step, *args):
        calls = []

        def stopping(ids, labels):
            calls.append(None)
            return (how or interrupt)() if args[-2] == epoch and len(calls) == 2 else step(ids, labels)

        return real(o, stopping, *args)

    monkeypatch.setattr(training, "_epoch", epoch_that_stops)


def state_directory(output):
    return output.parent / (".%s%s" % (output.name, training.RESUME_SUFFIX))


@pytest.mark.parametrize("loss", ["cosent", "softmax"])
def test_a_resumed_run_ends_with_the_weights_of_a_run_never_stopped(
    tiny_model, pair_files, tmp_path, monkeypatch, loss
):
    """Three epochs straight, against a run stopped in epoch 2 (after a step it must forget)
    and resumed: the same weights bit for bit (model, softmax head and Adam's moments put back,
    and the shuffle of epochs 2 and 3 drawn as the uninterrupted run drew them)."""
    options = {"epochs": 3, "loss": loss, "seed": 5}
    quick(tiny_model, pair_files, tmp_path / "straight", **options)
    output = tmp_path / "resumed"
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            quick(tiny_model, pair_files, output, resume=True, **options)
    assert not output.exists() and os.listdir(state_directory(output)) == [training.STATE_FILE]
    lines = []
    result = quick(tiny_model, pair_files, output, resume=True, report=lines.append, **options)
    assert lines[0] == "resumed after epoch 1 from %s" % state_directory(output)
    assert [line.split(":")[0] for line in lines[1:]] == ["epoch 2/3", "epoch 3/3"]
    assert result.record["resumed_after"] == [1] and [e["epoch"] for e in result.record["epochs"]] == [1, 2, 3]
    straight, resumed = checkpoint(tmp_path / "straight"), checkpoint(output)
    for name, value in straight.items():
        assert np.array_equal(resumed[name], value), name
    assert sorted(os.listdir(tmp_path)) == ["resumed", "straight"]  # the state is gone once written


@pytest.mark.parametrize("stopped_in", [2, 3])
def test_the_best_valid_epoch_is_kept_across_a_resume(tiny_model, pair_files, tmp_path, monkeypatch, stopped_in):
    """Valid Spearmans 0.5, 0.1, 0.3: epoch 1 is kept whether the run stopped while it was the
    last one done (its weights are the state's) or after epoch 2 (saved apart in the state)."""
    spearmans = iter([0.0, 0.5, 0.1, 0.3])  # the base, then epochs 1-3, over both runs
    monkeypatch.setattr(training, "_valid_spearman", lambda encoder, valid: next(spearmans))
    options = {"epochs": 3, "valid_file": pair_files[1], "resume": True}
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, stopped_in)
        with pytest.raises(KeyboardInterrupt):
            quick(tiny_model, pair_files, tmp_path / "best", **options)
    lines = []
    result = quick(tiny_model, pair_files, tmp_path / "best", report=lines.append, **options)
    assert result.record["kept_epoch"] == 1 and lines[-1] == "kept epoch 1 (valid Spearman 0.5000)"
    assert [entry["valid_spearman"] for entry in result.record["epochs"]] == [0.5, 0.1, 0.3]
    quick(tiny_model, pair_files, tmp_path / "one", epochs=1)
    best, one = checkpoint(tmp_path / "best"), checkpoint(tmp_path / "one")
    for name, value in one.items():
        assert np.array_equal(best[name], value), name


def test_a_state_is_taken_up_only_by_the_same_run(tiny_model, pair_files, tmp_path, monkeypatch):
    """Another setting, another train file or fewer epochs than the state has done are refused
    in one line naming what differs, and leave the state; so does a second run while one holds
    it; the clean-up of temporaries leaves it too."""
    from bert_whitening.io import atomic

    output = tmp_path / "model"
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            quick(tiny_model, pair_files, output, epochs=3, resume=True)
    state = state_directory(output)
    os.utime(state, (0, 0))
    atomic.remove_stale(str(output))
    other = write_pairs(tmp_path / "other.data", random_pairs(7))
    cases = [
        ({"learning_rate": 2e-3}, r"state.npz: cannot resume: its learning_rate is 0.001, this run's is 0.002; "),
        ({"pooling": "cls"}, r"its pooling is \"first-last-avg\", this run's is \"cls\""),
        ({"train": other}, r"its train_sha256 is \"[0-9a-f]{64}\", this run's is \"[0-9a-f]{64}\""),
        ({"epochs": 1}, r"cannot resume: it has 2 epochs done, more than epochs 1; ask for 2 or more"),
    ]
    for options, message in cases:
        train = options.pop("train", pair_files[0])
        with pytest.raises(TrainingError, match=message) as error:
            quick(tiny_model, (train,), output, resume=True, **{"epochs": 3, **options})
        assert "\n" not in str(error.value)
    directory, lock = atomic.kept_directory(str(output), training.RESUME_SUFFIX)
    try:
        with pytest.raises(TrainingError, match="another run training into .*model holds this state"):
            quick(tiny_model, pair_files, output, epochs=3, resume=True)
    finally:
        os.close(lock)
    assert directory == str(state) and os.listdir(state) == [training.STATE_FILE] and not output.exists()
    result = quick(tiny_model, pair_files, output, epochs=3, resume=True)
    assert result.record["resumed_after"] == [2] and not state.exists()


def edit_record(arrays, **changes):
    record = json.loads(str(arrays["state"]))
    record.update(changes)
    arrays["state"] = np.array(json.dumps(record))


STATE_EDITS = [
    (lambda a: edit_record(a, kept=99), "cannot resume: its record is damaged or edited"),
    (lambda a: edit_record(a, rng={"bit_generator": "PCG64", "state": "x"}), "its record is damaged or edited"),
    (lambda a: edit_record(a, epochs="two"), "its record is damaged or edited"),
    (lambda a: edit_record(a, epochs=[{"evil": "x"}, {"evil": "y"}]), "its record is damaged or edited"),
    (lambda a: edit_record(a, epochs=[], kept=0), "its record is damaged or edited"),  # no state has none
    (lambda a: edit_record(a, best=0.5), "its record is damaged or edited"),  # a valid Spearman, no valid file
    (lambda a: edit_record(a, resumed_after=[1, 0]), "its record is damaged or edited"),
    (lambda a: a.update(variable_0=a["variable_0"].astype(np.int32)), "variable_0 holds int32, the variable is"),
    (lambda a: a.update(variable_0=a["variable_0"].astype(np.float16)), "variable_0 holds float16"),
    (  # the step count: the optimizer's one integer scalar
        lambda a: a.update({n: v - 1 for n, v in a.items() if n != "state" and v.shape == () and v.dtype.kind == "i"}),
        "its step count is 2, its epochs took 3 steps",
    ),
    (lambda a: a.update(variable_0=np.full_like(a["variable_0"], np.nan)), "variable_0 holds NaN or inf"),
    (lambda a: a.update(variable_1=np.zeros((3, 3), np.float32)), "variable_1 has shape (3, 3), expected"),
    (lambda a: a.update(extra=np.zeros(2)), "not a training state, unexpected arrays extra"),
    (lambda a: a.pop("variable_2"), "not a training state, missing variable_2"),
    (  # one line, however many are missing, in their numbers' order
        lambda a: [a.pop("variable_%d" % number) for number in (12, 2, 10, 3, 11)],
        "not a training state, missing variable_2, variable_3, variable_10 and 2 more",
    ),
    (lambda a: a.update(variable_0=np.array(["text"])), "variable_0 has shape (1,), expected"),
    (  # a state of an earlier layout (format 1: tf-keras' Adam), identity and arrays alike
        lambda a: edit_record(a, identity={**json.loads(str(a["state"]))["identity"], "format": 1}),
        "cannot resume: its format is 1, this run's is %d" % training.STATE_FORMAT,
    ),
]


def stopped_in_epoch_2(tiny_model, pair_files, output, monkeypatch):
    """The state file a 3-epoch run into ``output`` with ``resume`` leaves when stopped in epoch 2."""
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            quick(tiny_model, pair_files, output, epochs=3, resume=True)
    return state_directory(output) / training.STATE_FILE


@pytest.mark.parametrize("edit, message", STATE_EDITS)
def test_a_damaged_or_edited_state_is_refused_in_one_line(tiny_model, pair_files, tmp_path, monkeypatch, edit, message):
    """A state edited by hand (its record, an array's values, shape or type, its members) is
    refused before anything is set from it, naming the file and how to start again, and left."""
    output = tmp_path / "model"
    path = stopped_in_epoch_2(tiny_model, pair_files, output, monkeypatch)
    with np.load(path) as stored:
        arrays = {name: stored[name] for name in stored.files}
    edit(arrays)
    np.savez(path, **arrays)
    with pytest.raises(TrainingError, match=re.escape(message)) as error:
        quick(tiny_model, pair_files, output, epochs=3, resume=True)
    text = str(error.value)
    assert text.startswith(str(path)) and "remove %s to start again" % state_directory(output) in text
    assert "\n" not in text and not output.exists() and path.exists()


@pytest.mark.parametrize("made", ["file", "link to a directory", "dangling link"])
def test_a_state_directory_that_is_not_a_directory_is_refused_in_one_line(tiny_model, pair_files, tmp_path, made):
    output = tmp_path / "model"
    state = state_directory(output)
    (tmp_path / "elsewhere").mkdir()
    {
        "file": lambda: state.write_text("mine"),
        "link to a directory": lambda: state.symlink_to(tmp_path / "elsewhere"),
        "dangling link": lambda: state.symlink_to(tmp_path / "nowhere"),
    }[made]()
    kind = "file" if made == "file" else "symbolic link"
    with pytest.raises(
        BertWhiteningError, match=re.escape("%s is a %s, where this run keeps its state" % (state, kind))
    ):
        quick(tiny_model, pair_files, output, epochs=1, resume=True)
    assert os.path.lexists(state) and not output.exists() and os.listdir(tmp_path / "elsewhere") == []


def test_a_state_file_that_is_a_link_is_neither_read_nor_written_through(tiny_model, pair_files, tmp_path, monkeypatch):
    output = tmp_path / "model"
    path = stopped_in_epoch_2(tiny_model, pair_files, output, monkeypatch)
    kept = tmp_path / "kept.npz"
    os.rename(path, kept)
    before = kept.read_bytes()
    path.symlink_to(kept)
    with pytest.raises(TrainingError, match=re.escape("%s: a symbolic link, not a run's state" % path)):
        quick(tiny_model, pair_files, output, epochs=3, resume=True)
    assert kept.read_bytes() == before and path.is_symlink() and not output.exists()


def test_a_state_that_is_not_an_archive_is_refused_in_one_line(tiny_model, pair_files, tmp_path):
    output = tmp_path / "model"
    state_directory(output).mkdir()
    (state_directory(output) / training.STATE_FILE).write_bytes(b"\x00" * 100)
    with pytest.raises(TrainingError, match="not a readable training state .*remove .* to start again"):
        quick(tiny_model, pair_files, output, epochs=3, resume=True)


def test_a_loss_that_is_not_finite_removes_the_state(tiny_model, pair_files, tmp_path, monkeypatch):
    """A resumed run would take the same steps to the same loss: nothing is kept."""
    stop_in_epoch(monkeypatch, 2, how=lambda: np.float32(np.nan))
    with pytest.raises(TrainingError, match=r"^epoch 2, step 2: the loss is nan"):
        quick(tiny_model, pair_files, tmp_path / "model", resume=True)
    assert os.listdir(tmp_path) == []


def test_the_command_resumes(tiny_model, pair_files, tmp_path, monkeypatch, caplog):
    output = tmp_path / "model"
    argv = ["train", "--train", pair_files[0], "--output", output, "--model", tiny_model[0], "--resume"]
    argv += ["--epochs", "2", "--batch-size", "8"]
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        assert run(*argv) == 130
    assert "kept in %s: the same command with --resume continues" % state_directory(output) in caplog.text
    assert run(*argv) == 0
    assert json.loads((output / training.TRAINING_FILE).read_text())["resumed_after"] == [1]
    assert not state_directory(output).exists()


def bad(tmp_path, name, rows):
    return write_pairs(tmp_path / name, rows)


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
        training.train(path, str(tmp_path / "out"), model=tiny_model[0], **options)
    assert "\n" not in str(error.value)
    assert not os.path.exists(tmp_path / "out")


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


def test_a_softmax_label_that_would_make_a_head_of_gbs_is_refused_and_unused_classes_are_said(
    tiny_model, tmp_path, caplog
):
    huge = training.read_pair_file(bad(tmp_path, "huge.data", [("a", "b", "0"), ("c", "d", "1000000000")]))
    with pytest.raises(
        DataError, match=r"huge.data:2: label 1000000000 makes 1000000001 classes, more than the softmax"
    ):
        training.softmax_classes(huge)
    largest = training.SOFTMAX_CLASSES - 1
    at_most = training.read_pair_file(bad(tmp_path, "most.data", [("a", "b", "0"), ("c", "d", str(largest))]))
    assert training.softmax_classes(at_most)[1] == training.SOFTMAX_CLASSES
    beyond = training.read_pair_file(bad(tmp_path, "beyond.data", [("a", "b", "0"), ("c", "d", str(largest + 1))]))
    with pytest.raises(DataError, match=r"beyond.data:2: label 1024 makes 1025 classes, more than the softmax"):
        training.softmax_classes(beyond)
    sparse = training.read_pair_file(bad(tmp_path, "sparse.data", [("a", "b", "0"), ("c", "d", "7")]))
    assert training.softmax_classes(sparse)[1] == 8
    assert "sparse.data: no pair has labels 1, 2, 3 and 3 more: the softmax head keeps 6 of its 8 classes unused" in (
        caplog.text
    )


def test_cosent_refuses_a_batch_of_one_pair(tiny_model, pair_files, tmp_path):
    """A batch of one pair holds no two pairs to order: every step's loss was 0, and the base
    model was written as trained."""
    with pytest.raises(BertWhiteningError, match="^batch_size 1 gives CoSENT nothing to compare"):
        training.train(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], batch_size=1)
    assert os.listdir(tmp_path) == []


def test_graded_softmax_labels_are_binarised(tiny_model, tmp_path):
    pairs = training.read_pair_file(
        bad(tmp_path, "graded.data", [("a", "b", "4.2"), ("c", "d", "1.5"), ("e", "f", "2.5")])
    )
    classes, count, how = training.softmax_classes(pairs)
    assert classes.tolist() == [1, 0, 0] and count == 2 and how == "labels above 2.5 as 1, the others as 0"
    classes, count, _ = training.softmax_classes(pairs, threshold=2.0)
    assert classes.tolist() == [1, 0, 1]
    integers = training.read_pair_file(bad(tmp_path, "classes.data", [("a", "b", "0"), ("c", "d", "2")]))
    classes, count, how = training.softmax_classes(integers)
    assert classes.tolist() == [0, 2] and count == 3
    assert training.softmax_classes(integers, threshold=1.0)[0].tolist() == [0, 1]


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
        training.train(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], loss=loss, **{option: value})
    assert os.listdir(tmp_path) == []


def test_an_unknown_loss_is_refused_naming_the_choices(tiny_model, pair_files, tmp_path):
    with pytest.raises(BertWhiteningError, match="^unknown loss 'cosine'; choose one of: cosent, softmax$"):
        training.train(pair_files[0], str(tmp_path / "out"), model=tiny_model[0], loss="cosine")
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
            training.train(pair_files[0], output, model=directory, **options)
    assert (existing / "keep").read_text() == "x" and valid.read_text() == open(pair_files[1]).read()


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
        training.train(pair_files[0], str(tmp_path / "out"), model=directory)


def test_the_command_trains_and_every_command_reads_its_output(tiny_model, pair_files, tmp_path, capsys):
    output = tmp_path / "model"
    argv = ["train", "--train", pair_files[0], "--valid", pair_files[1], "--output", output, "--model", tiny_model[0]]
    argv += ["--pooling", "cls", "--epochs", "2", "--learning-rate", "1e-3", "--batch-size", "8"]
    assert run(*argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("epoch 0 (the base model): valid Spearman ")
    assert [line.split(":")[0] for line in printed[1:3]] == ["epoch 1/2", "epoch 2/2"]
    assert all(", valid Spearman " in line and "train loss " in line for line in printed[1:3])
    record = json.loads((output / training.TRAINING_FILE).read_text())
    assert printed[3].startswith("kept epoch %d (valid Spearman " % record["kept_epoch"])
    assert record["hyperparameters"]["batch_size"] == 8 and record["hyperparameters"]["threshold"] is None
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(sentence + "\n" for sentence in SENTENCES), encoding="utf-8")
    assert run("encode", "--model", output, "--pooling", "cls", "--output", tmp_path / "v.npy", sentences) == 0
    expected = encode(build_encoder(str(output), pooling="cls"), SENTENCES)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)
    assert run("train", "--train", pair_files[0], "--output", output, "--model", tiny_model[0]) == 1  # exists


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
    monkeypatch.setattr(training, "_train_and_write", lambda *arguments: pytest.fail("training started"))
    output = tmp_path / "out"
    with pytest.raises(
        TrainingError, match=r"^--batch-size 1000 \(batch_size\): a training step of 24 pairs \(the whole "
    ):
        quick(tiny_model, pair_files, output, batch_size=1000, maxlen=32, epochs=1)
    assert not output.exists()


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


def test_sentence_encoder_train_resumes(tiny_model, pair_files, tmp_path, monkeypatch):
    from bert_whitening import SentenceEncoder

    output = tmp_path / "model"
    encoder = SentenceEncoder.load(tiny_model[0], pooling="cls")
    with monkeypatch.context() as patch:
        stop_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            encoder.train(pair_files[0], str(output), epochs=2, batch_size=8, resume=True)
    assert state_directory(output).exists()
    assert encoder.train(pair_files[0], str(output), epochs=2, batch_size=8, resume=True)["resumed_after"] == [1]


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
def test_sigterm_then_resume_in_another_process_gives_the_uninterrupted_weights(tiny_model, pair_files, tmp_path):
    """The command with --resume in a child, SIGTERM once its first epoch is printed: status
    143, no model, the state kept; a second child resumes it; the weights are those of three
    epochs in one run, bit for bit, across processes."""
    output = tmp_path / "model"
    argv = ["-m", "bert_whitening", "train", "--train", pair_files[0], "--output", output, "--model", tiny_model[0]]
    argv += ["--epochs", "3", "--batch-size", "4", "--learning-rate", "1e-3", "--resume"]
    process = subprocess.Popen(launched(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout.readline().startswith(b"epoch 1/3: train loss ")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, stderr
    assert not output.exists() and state_directory(output).exists()
    resumed = subprocess.run(launched(argv), capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads((output / training.TRAINING_FILE).read_text())["resumed_after"]
    quick(tiny_model, pair_files, tmp_path / "straight", epochs=3, batch_size=4)
    straight, written = checkpoint(tmp_path / "straight"), checkpoint(output)
    for name, value in straight.items():
        assert np.array_equal(written[name], value), name
    assert done and sorted(os.listdir(tmp_path)) == ["model", "straight"]


@pytest.mark.slow
def test_the_built_in_model_round_trips_through_a_google_directory(tmp_path):
    """all-MiniLM-L6-v2 (Hugging Face format) after no step: the Google directory holds its
    tensors bit for bit under Google names, and gives its vectors exactly."""
    from bert_whitening.checkpoints import find_model

    path = write_pairs(tmp_path / "pairs.data", random_pairs(0, count=8))
    training.train(path, str(tmp_path / "minilm"), model="minilm", epochs=0, report=lambda line: None)
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
    from test_losses import numpy_cosent, numpy_softmax

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
    monkeypatch.setattr(training, "_valid_spearman", lambda encoder, valid: next(spearmans))
    result = quick(tiny_model, pair_files, tmp_path / "best", epochs=3, valid_file=pair_files[1])
    assert result.record["kept_epoch"] == 1
    quick(tiny_model, pair_files, tmp_path / "one", epochs=1)
    best, one = checkpoint(tmp_path / "best"), checkpoint(tmp_path / "one")
    for name, value in one.items():
        assert np.array_equal(best[name], value), name
