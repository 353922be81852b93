"""``--precision auto`` (the commands' default): float32 on a CPU without bfloat16 instructions,
else bfloat16 only if every vector of the first sentences stays within the cosine bound.

The suite pins ``BERT_WHITENING_PRECISION=float32`` (conftest.py) so that every other test's
vectors are float32 on any CPU; these tests take the pin off."""

import logging

import numpy as np
import pytest

from bert_whitening import cli, encoding, precision
from bert_whitening.encoding import encode
from bert_whitening.names import PRECISION_VARIABLE
from bert_whitening.precision import AUTO_MIN_COSINE, auto_precision, process_precision

from helpers import SENTENCES, run


def bfloat16_rounded(vectors):
    """``vectors`` rounded to bfloat16's 8 significant bits (round half to even), as floats."""
    bits = np.asarray(vectors, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def rotated(vector, cosine, rng):
    """A vector of ``vector``'s length at ``cosine`` to it."""
    other = rng.normal(size=vector.shape)
    other -= other @ vector / (vector @ vector) * vector
    other *= np.linalg.norm(vector) / np.linalg.norm(other)
    return cosine * vector + np.sqrt(1 - cosine**2) * other


def test_auto_keeps_float32_on_a_cpu_without_bfloat16():
    assert auto_precision(False, None) == ("float32", "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)")


def test_auto_keeps_bfloat16_only_when_every_check_vector_is_within_the_bound():
    rng = np.random.default_rng(0)
    exact = rng.normal(size=(256, 32))
    choice, why = auto_precision(True, exact, bfloat16_rounded(exact))
    assert choice == "bfloat16" and why.startswith("every vector of 256 check sentences within cosine 0.99999"), why
    for cosine, expected in ((AUTO_MIN_COSINE + 1e-6, "bfloat16"), (AUTO_MIN_COSINE - 1e-6, "float32")):
        moved = exact.copy()
        moved[200] = rotated(exact[200], cosine, rng)
        assert auto_precision(True, exact, moved)[0] == expected, cosine
    choice, why = auto_precision(True, exact, moved)
    assert why == "bfloat16 moved a check vector to cosine 0.998999 of float32 (below 0.999)"


@pytest.fixture
def fresh_process(monkeypatch):
    """The precision as a new command finds it (never set, no pin); the test process's own
    precision and TensorFlow's rewrite option are put back afterwards."""
    monkeypatch.setattr(precision, "_process_precision", None)
    monkeypatch.delenv(PRECISION_VARIABLE)
    yield monkeypatch
    monkeypatch.undo()
    precision._apply(precision._process_precision or "float32")


def encode_log(tmp_path, model, caplog):
    """``encode`` of SENTENCES with the default precision: its vectors and log."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        assert run("encode", "--model", model, "--output", tmp_path / "out.npy", tmp_path / "in.txt") == 0
    return np.load(tmp_path / "out.npy"), caplog.text


def test_encode_decides_once_and_says_what_it_chose(fresh_process, tiny_model, encoders, tmp_path, caplog):
    vectors, log = encode_log(tmp_path, tiny_model[0], caplog)
    expected = encode(encoders["first-last-avg"], SENTENCES)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    if not precision.cpu_has_bfloat16():
        assert "--precision auto chose float32: this CPU has no bfloat16 instructions" in log
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
    else:  # a CPU with bfloat16: either choice is right, if it is said and bounded
        assert "--precision auto chose %s: " % process_precision() in log
        assert (vectors * expected).sum(axis=1).min() >= AUTO_MIN_COSINE
    assert process_precision() in ("float32", "bfloat16")
    caplog.clear()
    encode_log(tmp_path, tiny_model[0], caplog)
    assert "--precision auto chose" not in caplog.text  # decided once per process


@pytest.mark.parametrize("bound, chosen", [(0.99, "bfloat16"), (1.5, "float32")])
def test_on_a_bfloat16_cpu_the_check_encodes_the_first_sentences_twice(
    fresh_process, tiny_model, tmp_path, caplog, bound, chosen
):
    """The CPU's answer and the bound forced: what the check sample holds and what decides."""
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    fresh_process.setattr(precision, "AUTO_MIN_COSINE", bound)
    calls = []
    run_batches = encoding._run_batches
    fresh_process.setattr(
        encoding,
        "_run_batches",
        lambda encoder, sequences, *rest: calls.append(len(sequences)) or run_batches(encoder, sequences, *rest),
    )
    fresh_process.setattr(precision, "AUTO_CHECK_SENTENCES", 10)
    fresh_process.setattr(precision, "AUTO_MIN_DISTINCT", 5)
    _, log = encode_log(tmp_path, tiny_model[0], caplog)
    assert calls == [10, 10, len(SENTENCES)]  # float32 and bfloat16 on the first 10, then all
    assert process_precision() == chosen
    assert ("--precision auto chose %s: " % chosen) in log
    assert ("check sentences" if chosen == "bfloat16" else "below 1.5") in log


def test_the_environment_sets_the_default_and_a_wrong_value_is_named(monkeypatch, tiny_model, tmp_path, capsys):
    monkeypatch.setenv(PRECISION_VARIABLE, "float16")
    with pytest.raises(SystemExit) as exit:
        run("encode", "--model", tiny_model[0], "--output", tmp_path / "out.npy", tmp_path / "in.txt")
    assert exit.value.code == 2
    assert "BERT_WHITENING_PRECISION=float16: choose one of auto, float32, bfloat16" in capsys.readouterr().err
    monkeypatch.setenv(PRECISION_VARIABLE, "bfloat16")
    assert (
        cli.build_parser().parse_args(["encode", "--model", "m", "--output", "o.npy", "in.txt"]).precision == "bfloat16"
    )
    monkeypatch.delenv(PRECISION_VARIABLE)
    assert cli.build_parser().parse_args(["encode", "--model", "m", "--output", "o.npy", "in.txt"]).precision == "auto"


def counted_batches(monkeypatch):
    """The sentences of each `encoding._run_batches` call, recorded as it runs."""
    calls, run_batches = [], encoding._run_batches

    def counted(encoder, sequences, *rest):
        calls.append([tuple(sequence) for sequence in sequences])
        return run_batches(encoder, sequences, *rest)

    monkeypatch.setattr(encoding, "_run_batches", counted)
    return calls


def test_the_check_takes_distinct_sentences_and_enough_of_them(fresh_process, tiny_model, tmp_path, caplog):
    """300 copies of one line before the real ones made a check of one sentence, which bfloat16
    passed while the real vectors moved to cosine -0.36 (a whitening fitted on few sentences)."""
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    fresh_process.setattr(precision, "AUTO_CHECK_SENTENCES", 10)
    fresh_process.setattr(precision, "AUTO_MIN_DISTINCT", 5)
    calls = counted_batches(fresh_process)
    lines = ["same"] * 30 + SENTENCES
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        assert run("encode", "--model", tiny_model[0], "--output", tmp_path / "o.npy", tmp_path / "in.txt") == 0
    assert [len(call) for call in calls] == [10, 10, len(lines)]
    assert len(set(calls[0])) == 10 and calls[0] == calls[1]  # the first 10 distinct, in both precisions


def test_too_few_distinct_sentences_keep_float32_without_a_check(fresh_process, tiny_model, tmp_path, caplog):
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    calls = counted_batches(fresh_process)
    lines = ["same"] * 300 + SENTENCES[:3]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        assert run("encode", "--model", tiny_model[0], "--output", tmp_path / "o.npy", tmp_path / "in.txt") == 0
    assert [len(call) for call in calls] == [len(lines)]  # no check: nothing it could bound
    assert process_precision() == "float32"
    assert (
        "--precision auto chose float32: only 4 distinct sentences to check bfloat16 on, fewer than 64" in caplog.text
    )


@pytest.mark.parametrize(
    "command, checked",
    [
        (lambda data, out: ["fit", "--output", out / "w.npz", data / "in.txt"], False),
        (lambda data, out: ["fit", "--method", "flow", "--output", out / "f.npz", data / "in.txt"], False),
        (lambda data, out: ["eval", "--task", "STS-B", "--data-dir", data, "--n-components", "0,4"], False),
        (lambda data, out: ["eval", "--task", "STS-B", "--data-dir", data, "--n-components", "0"], True),
    ],
)
def test_a_command_that_fits_on_its_vectors_decides_float32_before_it_encodes(
    fresh_process, tiny_model, tmp_path, caplog, command, checked
):
    """The check would compare vectors before the fit that then whitens them: eval chose bfloat16
    on raw vectors that passed, and the whitened ones moved Spearman by 0.03. Raw vectors alone
    (k = 0) are what the check compares, so it runs."""
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    fresh_process.setattr(precision, "AUTO_MIN_DISTINCT", 2)
    calls = counted_batches(fresh_process)
    (tmp_path / "STS-B").mkdir()
    pairs = [
        "%s\t%s\t%d" % (a, b, i % 6)
        for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1], strict=True))
    ]
    (tmp_path / "STS-B" / "STS-B.test.data").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES * 20) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        assert run(*command(tmp_path, tmp_path), "--model", tiny_model[0]) == 0
    said = "--precision auto chose float32: the vectors it encodes are fitted on"
    assert (said in caplog.text) != checked
    assert (len(calls) > 1 and calls[0] == calls[1]) == checked  # the check's two encodings of one sample
