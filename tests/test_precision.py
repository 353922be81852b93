"""``--precision auto`` (the commands' default): float32 on a CPU without bfloat16 instructions,
else bfloat16 only if every vector of the first sentences stays within the cosine bound.

The suite pins ``BERT_WHITENING_PRECISION=float32`` (conftest.py) so that every other test's
vectors are float32 on any CPU; these tests take the pin off."""

import logging
import threading

import numpy as np
import pytest

from bert_whitening import cli, encoding, precision
from bert_whitening.encoding import encode
from bert_whitening.errors import BertWhiteningError
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


def test_a_check_vector_exactly_at_the_bound_keeps_bfloat16(monkeypatch):
    monkeypatch.setattr(precision, "AUTO_MIN_COSINE", 1.0)
    exact = np.eye(4)
    assert auto_precision(True, exact, exact * 2) == (
        "bfloat16",
        "every vector of 4 check sentences within cosine 1.000000 of float32",
    )


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
    with caplog.at_level(logging.DEBUG):
        assert run("encode", "--model", model, "--output", tmp_path / "out.npy", tmp_path / "in.txt") == 0
    return np.load(tmp_path / "out.npy"), caplog.text


def test_the_precision_is_chosen_once_per_process(fresh_process):
    assert process_precision() is None and precision.running() == "float32"
    precision.set_precision("auto")
    assert process_precision() == "auto" and precision.running() == "float32"  # until auto has chosen
    precision.set_precision("bfloat16")  # a pending auto gives way to a choice
    assert process_precision() == "bfloat16" and precision.running() == "bfloat16"
    precision.set_precision("bfloat16")
    precision.set_precision("auto")  # once a precision is set, auto keeps it
    assert process_precision() == "bfloat16" and precision.running() == "bfloat16"
    with pytest.raises(BertWhiteningError) as raised:
        precision.set_precision("float32")
    assert str(raised.value) == (
        "this process already encodes in bfloat16; precision is chosen once per process (got float32)"
    )
    with pytest.raises(BertWhiteningError) as raised:
        precision.set_precision("float16")
    assert str(raised.value) == "unknown precision 'float16'; choose one of: auto, float32, bfloat16"
    assert process_precision() == "bfloat16"


@pytest.mark.parametrize("chosen", [None, "float32", "bfloat16"])
def test_a_precision_scope_switches_for_its_block_and_restores_the_process_precision(fresh_process, chosen):
    if chosen:
        precision.set_precision(chosen)
    with pytest.raises(KeyError):
        with precision.precision_scope("bfloat16" if chosen != "bfloat16" else "float32"):
            assert precision.running() == ("bfloat16" if chosen != "bfloat16" else "float32")
            raise KeyError("a failure inside")
    assert precision.running() == (chosen or "float32") and process_precision() == chosen
    with pytest.raises(BertWhiteningError) as raised:
        with precision.precision_scope("float16"):
            pass
    assert str(raised.value) == "unknown precision 'float16'; choose one of: auto, float32, bfloat16"
    assert precision.running() == (chosen or "float32")


@pytest.mark.parametrize("cpu, warned", [(False, True), (True, False), (None, False)])
def test_bfloat16_on_a_cpu_without_its_instructions_is_run_with_a_warning(fresh_process, caplog, cpu, warned):
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: cpu)
    with caplog.at_level(logging.WARNING, logger="bert_whitening"):
        precision.set_precision("bfloat16")
    assert precision.running() == "bfloat16"
    said = (
        "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): TensorFlow emulates them, so --precision "
        "bfloat16 is likely slower than float32"
    )
    assert caplog.messages == ([said] if warned else [])


@pytest.mark.parametrize(
    "cpuinfo, bfloat16, amx",
    [
        ("flags\t: fpu avx512f avx512_bf16 sse\n", True, False),
        ("flags\t: amx_bf16 amx_tile\n", True, True),
        ("flags\t: avx2\n", False, False),
    ],
)
def test_the_cpu_has_bfloat16_and_amx_when_its_flags_say_so(monkeypatch, tmp_path, cpuinfo, bfloat16, amx):
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    real_open = open
    monkeypatch.setattr(precision, "open", lambda path, *rest: real_open(tmp_path / "cpuinfo", *rest), raising=False)
    precision._cpuinfo.cache_clear()
    try:
        assert (precision.cpu_has_bfloat16(), precision.cpu_has_amx()) == (bfloat16, amx)
        monkeypatch.setattr(precision, "open", lambda *args: (_ for _ in ()).throw(PermissionError()), raising=False)
        precision._cpuinfo.cache_clear()
        assert (precision.cpu_has_bfloat16(), precision.cpu_has_amx()) == (None, None)  # unreadable: not known
    finally:
        precision._cpuinfo.cache_clear()


def check_vectors_of(calls, moved=0.0):
    """A check's ``check_vectors``: each sample's vectors in the running precision (rotated by
    ``moved`` in bfloat16), each call's precision and sample recorded in ``calls``."""

    def vectors(sample):
        calls.append((precision.running(), list(sample)))
        exact = np.array([[1.0, float(len(ids)), 0.0] for ids in sample])
        return exact + [0.0, 0.0, moved] if precision.running() == "bfloat16" else exact

    return vectors


@pytest.mark.parametrize(
    "cpu, distinct, moved, chosen, checked, why",
    [
        (True, 64, 0.0, "bfloat16", True, "every vector of 64 check sentences within cosine 1.000000 of float32"),
        (True, 64, 1.0, "float32", True, "bfloat16 moved a check vector to cosine 0.912871 of float32 (below 0.999)"),
        (True, 63, 0.0, "float32", False, "only 63 distinct sentences to check bfloat16 on, fewer than 64"),
        (False, 64, 0.0, "float32", False, "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)"),
        (None, 64, 0.0, "float32", False, "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)"),  # unknown
    ],
)
def test_auto_decides_on_its_check_once_and_says_why(fresh_process, caplog, cpu, distinct, moved, chosen, checked, why):
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: cpu)
    precision.set_precision("auto")
    sample, calls = [[2] + [5] * length + [3] for length in range(distinct)], []
    with caplog.at_level(logging.DEBUG, logger="bert_whitening"):
        precision.resolve_auto(sample, check_vectors_of(calls, moved))
        precision.resolve_auto(sample, check_vectors_of(calls, moved))  # decided: nothing more
        precision.resolve_before_fitting()
    assert calls == ([("float32", sample), ("bfloat16", sample)] if checked else [])
    assert process_precision() == chosen and precision.running() == chosen
    assert caplog.messages == ["--precision auto chose %s: %s" % (chosen, why)]


class SignallingLock:
    """`precision._auto_lock` that sets ``contended`` when a thread finds it held and waits."""

    def __init__(self):
        self.lock, self.contended = threading.Lock(), threading.Event()

    def __enter__(self):
        if not self.lock.acquire(blocking=False):
            self.contended.set()
            self.lock.acquire()

    def __exit__(self, *exception):
        self.lock.release()


@pytest.mark.parametrize("second", ["resolve_auto", "resolve_before_fitting"])
def test_a_thread_that_waited_for_the_check_keeps_its_decision(fresh_process, caplog, second):
    """Two threads start encoding while ``auto`` is pending: the second waits on the lock while
    the first checks, then finds the precision decided. It checked bfloat16 again (two checks,
    two lines), or a fit's float32 replaced the bfloat16 the first had chosen and run with."""
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    lock = SignallingLock()
    fresh_process.setattr(precision, "_auto_lock", lock)
    precision.set_precision("auto")
    sample, calls = [[2] + [5] * length + [3] for length in range(64)], []
    check = check_vectors_of(calls)

    checking = threading.Event()

    def first_check(sample):
        if not calls:  # the first thread's first encoding, under the lock: once the second waits for it
            checking.set()
            lock.contended.wait(10)
        return check(sample)

    first = threading.Thread(target=precision.resolve_auto, args=(sample, first_check))
    with caplog.at_level(logging.DEBUG, logger="bert_whitening"):
        first.start()
        assert checking.wait(10)
        if second == "resolve_auto":
            precision.resolve_auto(sample, check)
        else:
            precision.resolve_before_fitting()
        first.join()
    assert calls == [("float32", sample), ("bfloat16", sample)]
    assert process_precision() == "bfloat16" and precision.running() == "bfloat16"
    assert caplog.messages == [
        "--precision auto chose bfloat16: every vector of 64 check sentences within cosine 1.000000 of float32"
    ]


@pytest.mark.parametrize("chosen", [None, "float32", "bfloat16"])
def test_only_a_pending_auto_is_resolved(fresh_process, caplog, chosen):
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    if chosen:
        precision.set_precision(chosen)
    calls = []
    with caplog.at_level(logging.DEBUG, logger="bert_whitening"):
        precision.resolve_auto([[2, 3]] * 64, check_vectors_of(calls))
        precision.resolve_before_fitting()
    assert calls == [] and caplog.messages == []
    assert process_precision() == chosen and precision.running() == (chosen or "float32")


def test_a_process_that_fits_on_its_vectors_resolves_auto_to_float32_before_it_encodes(fresh_process, caplog):
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    precision.set_precision("auto")
    calls = []
    with caplog.at_level(logging.DEBUG, logger="bert_whitening"):
        precision.resolve_before_fitting()
        precision.resolve_auto([[2, 3]] * 64, check_vectors_of(calls))
    assert calls == [] and process_precision() == "float32" and precision.running() == "float32"
    assert caplog.messages == [
        "--precision auto chose float32: the vectors it encodes are fitted on, and no check before the fit bounds "
        "how far the fit scales bfloat16's rounding up (--precision bfloat16 runs it anyway)"
    ]


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
    with caplog.at_level(logging.DEBUG):
        assert run("encode", "--model", tiny_model[0], "--output", tmp_path / "o.npy", tmp_path / "in.txt") == 0
    assert [len(call) for call in calls] == [10, 10, len(lines)]
    assert len(set(calls[0])) == 10 and calls[0] == calls[1]  # the first 10 distinct, in both precisions


def test_the_check_takes_the_first_256_distinct_sentences_of_a_call(fresh_process, encoders):
    """At the defaults docs/cli.md gives: the first 256 distinct sentences (a repeated one counted
    once), encoded in float32 and in bfloat16, then the whole call."""
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    precision.set_precision("auto")
    calls = counted_batches(fresh_process)
    characters = "今天气很好我们你他她是的不在有一个人中国北京上海爱喝茶"
    texts = [first + second for first in characters for second in characters][:300]  # 300 distinct
    encode(encoders["cls"], texts[:1] * 10 + texts)
    assert [len(call) for call in calls] == [256, 256, 310]
    expected = [tuple(encoders["cls"].tokenizer.encode(text)[0]) for text in texts[:256]]
    assert calls[0] == calls[1] == expected


def test_too_few_distinct_sentences_keep_float32_without_a_check(fresh_process, tiny_model, tmp_path, caplog):
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    calls = counted_batches(fresh_process)
    lines = ["same"] * 300 + SENTENCES[:3]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.DEBUG):
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
    with caplog.at_level(logging.DEBUG):
        assert run(*command(tmp_path, tmp_path), "--model", tiny_model[0]) == 0
    said = "--precision auto chose float32: the vectors it encodes are fitted on"
    assert (said in caplog.text) != checked
    assert (len(calls) > 1 and calls[0] == calls[1]) == checked  # the check's two encodings of one sample


def test_an_encoding_of_no_sentence_leaves_auto_to_the_sentences_that_follow(fresh_process, encoders, caplog):
    """``encode([])`` has no sentence to check bfloat16 on: it decides nothing (the command's first
    real sentences do), rather than float32 for want of a sample."""
    fresh_process.setattr(precision, "cpu_has_bfloat16", lambda: True)
    precision.set_precision("auto")
    with caplog.at_level(logging.DEBUG, logger="bert_whitening"):
        assert encode(encoders["cls"], []).shape == (0, encoders["cls"].dim)
    assert process_precision() == "auto" and caplog.messages == []


@pytest.mark.parametrize(
    "command, n_components, fits",
    [("fit", (), True), ("beam-fit", (), True), ("eval", (0, 256), True), ("eval", (0,), False)]
    + [("eval-retrieval", (-1,), True), ("encode", (256,), False), ("index", (), False)],
)
def test_a_run_fits_its_vectors_when_it_fits_or_evaluates_a_whitening(command, n_components, fits):
    assert precision.fits_its_vectors(command, n_components) is fits


@pytest.mark.parametrize(
    "command, given, read_only, methods, expected",
    [
        ("encode", "auto", True, ("whitening",), ("auto", False, True)),
        ("fit", "auto", True, ("whitening",), ("auto", True, False)),  # float32 before the fit
        ("fit", "bfloat16", True, ("whitening",), ("bfloat16", False, True)),
        ("fit", "bfloat16", True, ("flow",), ("bfloat16", False, False)),  # a flow is trained
        ("encode", "float32", True, ("whitening",), ("float32", False, False)),
        ("export", "bfloat16", False, ("whitening",), ("bfloat16", False, False)),
    ],
)
def test_one_decision_says_what_a_command_runs_and_whether_it_promises_frozen_weights(
    monkeypatch, command, given, read_only, methods, expected
):
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: True)
    decision = precision.decide(command, given, read_only, (), methods)
    assert (decision.precision, decision.float32_before_fitting, decision.frozen_weights) == expected
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: False)
    assert not precision.decide(command, given, read_only, (), methods).frozen_weights
