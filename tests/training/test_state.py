"""The resumable state of a run with ``resume`` (`bert_whitening.training.state`): a run stopped
and resumed ends as one never stopped, a state is taken up only by the same run, and a damaged
or edited state is refused in one line and left in place."""

import json
import os
import re
import signal
import subprocess

import numpy as np
import pytest

from bert_whitening import training
from bert_whitening.checkpoints import TRAINING_FILE
from bert_whitening.errors import BertWhiteningError, TrainingError
from bert_whitening.training import loop

from helpers import (
    checkpoint,
    launched,
    quick,
    random_pairs,
    state_directory,
    write_pairs,
)


def stop_in_epoch(monkeypatch, epoch, how=None):
    """Make the run stop at the second step of ``epoch``, once its first step has moved the
    weights and Adam's moments in memory: ``how()`` gives that step's loss (default: SIGINT's
    `KeyboardInterrupt`)."""
    real = loop._epoch

    def interrupt():
        raise KeyboardInterrupt

    def epoch_that_stops(o, step, *args):
        calls = []

        def stopping(ids, labels):
            calls.append(None)
            return (how or interrupt)() if args[-2] == epoch and len(calls) == 2 else step(ids, labels)

        return real(o, stopping, *args)

    monkeypatch.setattr(loop, "_epoch", epoch_that_stops)


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
    monkeypatch.setattr(loop, "_valid_spearman", lambda encoder, valid: next(spearmans))
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


def generator_edits():
    """Generator states of the right form but out of range, or of the wrong type, in each of
    the integers numpy puts in a C integer (it raised OverflowError on these, uncaught)."""
    state = training.order_generator(0).bit_generator.state

    def edited(inner=None, **outer):
        return {**state, **outer, "state": {**state["state"], **(inner or {})}}

    return [
        edited({"state": -1}),
        edited({"state": 2**128}),
        edited({"inc": 2**200}),
        edited({"inc": 1.5}),
        edited(has_uint32=2**70),
        edited(has_uint32=7),
        edited(uinteger=-5),
        edited(uinteger=2**32),
        edited(uinteger=True),
        edited(bit_generator="MT19937"),
        {**state, "state": [1, 2]},
        [state],
    ]


def test_a_generator_state_out_of_range_is_refused_in_one_line(tiny_model, pair_files, tmp_path, monkeypatch):
    """A state whose shuffle's generator is out of range (a negative or too large integer, a
    float, a bool) was a traceback from numpy; it is refused as damaged, naming the file, and
    left as it was."""
    output = tmp_path / "model"
    path = stopped_in_epoch_2(tiny_model, pair_files, output, monkeypatch)
    with np.load(path) as stored:
        arrays = {name: stored[name] for name in stored.files}
    for rng in generator_edits():
        edit_record(arrays, rng=rng)
        np.savez(path, **arrays)
        written = path.read_bytes()
        with pytest.raises(training.DamagedState, match="cannot resume: its record is damaged or edited") as error:
            quick(tiny_model, pair_files, output, epochs=3, resume=True)
        text = str(error.value)
        assert text.startswith(str(path)) and "remove %s to start again" % state_directory(output) in text, rng
        assert "\n" not in text and not output.exists() and path.read_bytes() == written, rng


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
    done = json.loads((output / TRAINING_FILE).read_text())["resumed_after"]
    quick(tiny_model, pair_files, tmp_path / "straight", epochs=3, batch_size=4)
    straight, written = checkpoint(tmp_path / "straight"), checkpoint(output)
    for name, value in straight.items():
        assert np.array_equal(written[name], value), name
    assert done and sorted(os.listdir(tmp_path)) == ["model", "straight"]
