"""The promise to oneDNN that weights never change (``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1``,
`bert_whitening.commands.base.weights_frozen`): made by the command line's own process alone, for the
commands that change no weight, where bfloat16 may run on a CPU with AMX; and those commands
compute the same under it.

The promise holds for a whole process and cannot be taken back, so nothing here makes it in the
test process: the cases that run TensorFlow under it run in a process of their own."""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_whitening import cli, precision
from bert_whitening.commands import base
from bert_whitening.commands import encode as encode_command
from bert_whitening.encoding import encode
from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE, PRECISION_VARIABLE

from helpers import SENTENCES, commands_in_a_fresh_process, run, synthetic_pairs

ENCODE = ["encode", "--output", "v.npy", "in.txt"]


@pytest.mark.parametrize(
    "argv, amx, frozen",
    [
        (ENCODE, True, True),  # auto may pick bfloat16
        (ENCODE, False, False),  # ... but not on this CPU
        (ENCODE + ["--precision", "bfloat16"], True, True),
        (ENCODE + ["--precision", "float32"], True, False),
        (["index", "--output", "ix", "in.txt"], True, True),
        (["eval", "--task", "STS-B", "--n-components", "0"], True, True),  # raw vectors only
        (["eval", "--task", "STS-B"], True, False),  # its whitening settings run float32 under auto
        (["eval", "--task", "STS-B", "--n-components", "0,256", "--precision", "bfloat16"], True, True),
        (["eval-retrieval", "--task", "STS-B", "--n-components", "0"], True, True),
        (["eval-retrieval", "--task", "STS-B", "--n-components", "0,-1"], True, False),
        (["eval", "--task", "STS-B", "--method", "whitening,flow"], True, False),  # trains a flow
        (["eval-retrieval", "--task", "STS-B", "--precision", "bfloat16"], True, True),
        (["fit", "--output", "w.npz", "in.txt"], True, False),  # fit's auto runs float32
        (["fit", "--output", "w.npz", "--precision", "bfloat16", "in.txt"], True, True),
        (["fit", "--output", "f.npz", "--method", "flow", "--precision", "bfloat16", "in.txt"], True, False),
        (["beam-encode", "--input", "in.txt", "--output", "v", "--precision", "bfloat16"], True, False),
    ],
)
def test_only_a_command_that_changes_no_weight_promises_it_where_bfloat16_may_run(monkeypatch, argv, amx, frozen):
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: amx)
    monkeypatch.delenv(PRECISION_VARIABLE)
    args = cli.build_parser().parse_args(argv)
    assert base.weights_frozen(args) is frozen


def test_deciding_it_imports_nothing_the_command_would_not():
    """`start` decides the promise in every command that sets a precision: asking whether an
    ``eval`` whitens must not import the evaluation module (and scipy with it) into ``encode``."""
    code = (
        "import sys; from bert_whitening import cli; from bert_whitening.commands.base import weights_frozen; "
        "weights_frozen(cli.build_parser().parse_args(['eval', '--task', 'STS-B'])); "
        "print(sorted({'bert_whitening.evaluation', 'scipy.stats', 'tensorflow'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["[]"], result.stderr[-2000:]


def test_train_cannot_promise_it():
    """``train`` changes every weight: its command has no precision to start from and is not
    among the commands that may promise."""
    args = cli.build_parser().parse_args(["train", "--train", "pairs.txt", "--output", "model"])
    assert getattr(args, "precision", None) is None
    args.precision = "bfloat16"
    assert not base.weights_frozen(args)


@pytest.mark.parametrize(
    "own_process, given, promised",
    [(True, None, "1"), (False, None, None), (True, "0", "0")],
)
def test_the_promise_is_the_command_line_s_own_process_s_and_a_value_set_by_the_user_stands(
    monkeypatch, own_process, given, promised
):
    """`base.start` only (nothing runs TensorFlow here): the Python API and tests that call
    `cli.main` in a process of theirs never promise."""
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: True)
    monkeypatch.setattr(precision, "set_precision", lambda chosen: None)
    monkeypatch.setenv(FROZEN_WEIGHTS_VARIABLE, "")  # recorded, so that what start sets is undone
    monkeypatch.delenv(FROZEN_WEIGHTS_VARIABLE)
    if given is not None:
        monkeypatch.setenv(FROZEN_WEIGHTS_VARIABLE, given)
    args = argparse.Namespace(
        command="encode", command_record=encode_command.COMMAND, precision="bfloat16", own_process=own_process
    )
    base.start(args)
    assert os.environ.get(FROZEN_WEIGHTS_VARIABLE) == promised


CONSOLE_ON_AN_AMX_CPU = (
    """
import json, os, sys
from bert_whitening import precision
precision.cpu_has_bfloat16 = precision.cpu_has_amx = lambda: True
from bert_whitening.cli import console_main
sys.argv = ["bert-whitening"] + sys.argv[1:]
status = console_main()
# Whether TensorFlow holds to the promise in this process: a product with its bias keeps the
# weights it read first (oneDNN's fused product, where oneDNN runs).
from bert_whitening.backend import tf
from bert_whitening.layers.fused_bert import _onednn_rewrites
kernel, bias = tf.Variable(tf.ones([8, 8])), tf.Variable(tf.ones([8]))
product = tf.function(lambda x: tf.nn.relu(tf.matmul(x, kernel) + bias))
first = product(tf.ones([2, 8])).numpy()
kernel.assign(2 * kernel)
kept = bool((product(tf.ones([2, 8])).numpy() == first).all())
print(json.dumps([status, os.environ.get("%s"), kept, _onednn_rewrites()]))
"""
    % FROZEN_WEIGHTS_VARIABLE
)


@pytest.mark.slow  # whole commands in processes of their own
def test_the_program_promises_it_in_bfloat16_on_an_amx_cpu_and_encodes_as_without(tiny_model, encoders, tmp_path):
    """The ``bert-whitening`` program (`cli.console_main`), the CPU's answer forced: the promise
    is made in time for TensorFlow to hold to it (where oneDNN runs the products), and
    the vectors are bfloat16's of this process, where no promise was made."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if key != FROZEN_WEIGHTS_VARIABLE}
    argv = ["encode", "--model", tiny_model[0], "--precision", "bfloat16", "--output", tmp_path / "v.npy"]
    result = subprocess.run(
        [sys.executable, "-c", CONSOLE_ON_AN_AMX_CPU, *map(str, argv), str(tmp_path / "in.txt")],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    status, promised, kept, onednn = json.loads(result.stdout.splitlines()[-1])
    assert (status, promised) == (0, "1"), result.stderr[-2000:]
    assert kept or not onednn
    with precision.precision_scope("bfloat16"):
        expected = encode(encoders["first-last-avg"], SENTENCES)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-5)


@pytest.mark.slow  # whole commands in processes of their own
def test_the_commands_that_promise_it_compute_the_same_under_it(tiny_model, tmp_path):
    """Under the promise oneDNN keeps the weights a product read first (on x86 CPUs also in
    float32, which this runs in): an encoder that changed a weight after a first product (a
    call before its weights are loaded, say) would go on with the old one there, and differ
    from the same commands run here, where no promise was made. ``encode``, and ``eval`` of
    two poolings on one pass (a joint model over the first encoder's layers)."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    pairs = "".join("%s\t%s\t%d\n" % pair for pair in synthetic_pairs(60))  # more sentences than dimensions
    (tmp_path / "pairs.txt").write_text(pairs, encoding="utf-8")

    def commands(name):
        options = ["--model", tiny_model[0], "--precision", "float32", "--batch-size", "2"]
        return [
            ["encode", *options, "--output", tmp_path / (name + ".npy"), tmp_path / "in.txt"],
            ["eval", *options, "--task", tmp_path / "pairs.txt", "--pooling", "first-last-avg,cls"]
            + ["--n-components", "0,-1,4", "--json", tmp_path / (name + ".json")],
        ]

    prelude = "import os; os.environ[%r] = '1'" % FROZEN_WEIGHTS_VARIABLE
    statuses, _, stderr = commands_in_a_fresh_process(commands("promised"), prelude)
    assert statuses == [0, 0], stderr[-2000:]
    assert [run(*command) for command in commands("here")] == [0, 0]
    np.testing.assert_allclose(np.load(tmp_path / "promised.npy"), np.load(tmp_path / "here.npy"), atol=1e-5)

    def scores(name):
        report = json.loads((tmp_path / (name + ".json")).read_text())
        return [
            (result["setting"], result["splits"]["test"])
            for pooling in report["poolings"]
            for task in pooling["tasks"].values()
            for result in task["results"]
        ]

    promised, here = scores("promised"), scores("here")
    assert [setting for setting, _ in promised] == [setting for setting, _ in here] and len(here) == 6
    np.testing.assert_allclose([score for _, score in promised], [score for _, score in here], atol=1e-6)
