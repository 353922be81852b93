"""Evaluation against the original eval.py procedure (tests/reference.py: `original_split_vectors`
and `original_scores`)."""

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_whitening import cli, encoding
from bert_whitening.backend import Tokenizer, build_transformer_model
from bert_whitening.checkpoints import find_model
from bert_whitening.data import ReadOptions, load_task
from bert_whitening.encoding import encode
from bert_whitening.errors import BertWhiteningError
from bert_whitening.evaluation import Setting, encode_splits, evaluate, fit_statistics, settings
from bert_whitening.names import POOLINGS

from reference import original_scores, original_split_vectors, spearman, su_9079_kernel

ROOT = os.path.join(os.path.dirname(__file__), "..")


def package_eval(encoder, splits, k):
    encoded = encode_splits(lambda s: encode(encoder, s), splits)
    (result,), whitening = evaluate(encoded, fit_statistics(encoded), [Setting(k)])
    return result, whitening


@pytest.fixture(scope="module")
def original_sample_vectors(tiny_model, sample_task):
    """The original procedure's vectors of SAMPLE for every pooling, from one bert4keras model
    (built with the pooler) in one pass, as `original_split_vectors` gives them per pooling."""
    files = find_model(tiny_model[0])
    bert = build_transformer_model(None, files.weights_path, with_pool="linear", **files.config)
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    vectors = original_split_vectors(bert, tokenizer, load_task("SAMPLE", sample_task), tuple(POOLINGS))
    return {
        pooling: {split: (first[pooling], second[pooling]) for split, (first, second) in vectors.items()}
        for pooling in POOLINGS
    }


@pytest.mark.parametrize("pooling", POOLINGS)
def test_tiny_model_equals_the_original_procedure(encoders, sample_task, original_sample_vectors, pooling):
    splits = load_task("SAMPLE", sample_task)
    ours_by_k = {k: package_eval(encoders[pooling], splits, k) for k in (0, -1, 16)}
    rank = ours_by_k[16][1].rank
    original = original_scores(original_sample_vectors[pooling], splits, [0, rank, 16])
    for k, (ours, whitening) in ours_by_k.items():
        # last-avg and cls vectors come out of one LayerNorm, pooler vectors are a linear map of
        # one, so one direction of their covariance is null; there "all" keeps the rank-many real
        # directions (the original scales round-off noise to unit variance there, which no two
        # runs reproduce alike). first-last-avg mixes two LayerNorms and is full rank.
        if whitening is not None:
            assert whitening.rank == (24 if pooling == "first-last-avg" else 23), pooling
        scores, avg, weighted = original[rank if k < 0 else k]
        for split in splits:
            assert abs(ours["splits"][split] - scores[split]) <= 1e-3, (pooling, k, split)
        assert abs(ours["avg"] - avg) <= 1e-3 and abs(ours["w-avg"] - weighted) <= 1e-3


def test_settings_are_combined_once_each():
    found = settings([0, -1, 8], [1.0, 0.5], [1.0])
    assert [s.label for s in found] == ["raw", "k=all", "k=all b=0.5 g=1", "k=8", "k=8 b=0.5 g=1"]


def test_original_command_line_prints_the_original_lines(tiny_model, sample_task, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    os.symlink(tiny_model[0], root / "chinese_L-12_H-768_A-12")
    task_dir = tmp_path / "data"
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), task_dir / "STS-B")
    for split in ("train", "valid", "test"):
        os.rename(task_dir / "STS-B" / ("SAMPLE.%s.data" % split), task_dir / "STS-B" / ("STS-B.%s.data" % split))
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "eval", "eval.py"),
            "BERT",
            "first-last-avg",
            "STS-B",
            "-1",
            "--model-root",
            str(root),
            "--data-dir",
            str(task_dir),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == ["STS-B-train", "STS-B-valid", "STS-B-test", "avg", "w-avg"]
    values = [float(line.split(": ")[1]) for line in lines]
    assert abs(values[3] - np.mean(values[:3])) < 1e-12
    assert abs(values[4] - np.average(values[:3], weights=[90, 60, 60])) < 1e-12
    out = tmp_path / "modern.json"
    assert (
        cli.main(
            [
                "eval",
                "--model",
                tiny_model[0],
                "--task",
                "STS-B",
                "--data-dir",
                str(task_dir),
                "--n-components",
                "-1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    modern = json.loads(out.read_text())["tasks"]["STS-B"]["results"][0]
    expected = list(modern["splits"].values()) + [modern["avg"], modern["w-avg"]]
    np.testing.assert_allclose(values, expected, atol=1e-6)  # the two commands agree


def test_setting_labels_and_their_combinations():
    from bert_whitening.evaluation import Setting

    assert [Setting(*args).label for args in [(0,), (0, 0.5, 0.5), (-1,), (-3, 1.0, 0.25), (8,), (8, 0.5, 1.0)]] == [
        "raw",
        "raw",
        "k=all",
        "k=all b=1 g=0.25",
        "k=8",
        "k=8 b=0.5 g=1",
    ]
    assert [s.label for s in settings([0, 0, -1], [1.0], [1.0, 0.0])] == ["raw", "k=all", "k=all b=1 g=0"]
    assert settings([4]) == [Setting(4, 1.0, 1.0)]
    assert [s.label for s in settings([0, -1, -2, -384])] == ["raw", "k=all"]  # two "k=all" columns were printed


def test_cosine_spearman_is_scipy_on_the_rowwise_cosine():
    from bert_whitening.evaluation import cosine_spearman

    rng = np.random.default_rng(0)
    first, second = rng.normal(size=(50, 6)) * rng.uniform(0.1, 10, (50, 1)), rng.normal(size=(50, 6))
    labels = rng.integers(0, 6, 50)
    cosines = [a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(first, second, strict=True)]
    assert abs(cosine_spearman(first, second, labels) - spearman(labels, cosines)) < 1e-12


def test_encode_splits_encodes_each_distinct_sentence_once_and_keeps_pair_order():
    calls = []

    def encode_lengths(sentences):
        calls.append(list(sentences))
        return [[len(s), ord(s[0])] for s in sentences]

    splits = {
        "train": [("ab", "c", 1.0), ("def", "gh", 0.0)],
        "valid": [("no", "c", 2.0)],
        "test": [("ijkl", "ab", 5.0), ("ab", "m", 3.0)],
    }
    encoded = encode_splits(encode_lengths, splits)
    assert calls == [["ab", "c", "def", "gh", "no", "ijkl", "m"]]
    assert list(encoded) == ["train", "valid", "test"]
    first, second, labels = encoded["train"]
    np.testing.assert_array_equal(first, [[2, ord("a")], [3, ord("d")]])
    np.testing.assert_array_equal(second, [[1, ord("c")], [2, ord("g")]])
    np.testing.assert_array_equal(labels, [1.0, 0.0])
    assert first.dtype == np.float64
    np.testing.assert_array_equal(encoded["valid"][1], [[1, ord("c")]])
    first, second, labels = encoded["test"]
    np.testing.assert_array_equal(first, [[4, ord("i")], [2, ord("a")]])
    np.testing.assert_array_equal(second, [[2, ord("a")], [1, ord("m")]])
    np.testing.assert_array_equal(labels, [5.0, 3.0])


def synthetic_encoded(dim=6, seed=0):
    """Splits of vector pairs whose cosine, after whitening, carries their labels."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(dim, dim)) * np.geomspace(4, 0.2, dim) + 3.0
    encoded = {}
    for split, count in (("train", 80), ("valid", 30), ("test", 50)):
        base = rng.normal(size=(count, dim))
        labels = rng.integers(0, 6, count).astype(float)
        other = base + rng.normal(size=(count, dim)) * (6 - labels)[:, None] / 3
        encoded[split] = (base @ mix + 5.0, other @ mix + 5.0, labels)
    return encoded


def test_fit_statistics_on_all_splits_or_train():
    encoded = synthetic_encoded()
    everything = np.concatenate([v for first, second, _ in encoded.values() for v in (first, second)])
    stats = fit_statistics(encoded)
    assert stats.count == 320
    np.testing.assert_allclose(stats.covariance, np.cov(everything.T), rtol=1e-9)
    train = fit_statistics(encoded, "train")
    np.testing.assert_allclose(train.covariance, np.cov(np.concatenate(encoded["train"][:2]).T), rtol=1e-9)
    del encoded["train"]
    with pytest.raises(ValueError) as info:
        fit_statistics(encoded, "train")
    assert str(info.value) == "--fit-on train: this task has no train split (splits: valid, test)"


def test_a_vector_fitted_on_that_is_not_a_number_names_its_split_and_row():
    """It was 'vector 163 (0-based, in input order)', a row of the splits' vectors one after the
    other, which named no split."""
    encoded = synthetic_encoded()
    encoded["valid"][1][3, 2] = np.nan
    encoded["train"][0][7, 0] = np.inf
    for fit_on, said in (
        ("all", "the train split's first sentences: row 7 (0-based): the vector holds inf (column 0)"),
        ("train", "the train split's first sentences: row 7 (0-based): the vector holds inf (column 0)"),
    ):
        with pytest.raises(ValueError) as info:
            fit_statistics(encoded, fit_on)
        assert str(info.value) == said
    encoded["train"][0][7, 0] = 0
    with pytest.raises(ValueError) as info:
        fit_statistics(encoded)
    assert str(info.value) == "the valid split's second sentences: row 3 (0-based): the vector holds nan (column 2)"


def test_files_are_fitted_as_one_stream_in_chunks_with_one_truncation_count(tmp_path, monkeypatch, caplog):
    import functools
    from types import SimpleNamespace

    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 2)
    (tmp_path / "s.txt").write_text("a\nbb\nccc\n", encoding="utf-8")
    (tmp_path / "p.data").write_text("dddd\te\t1\nbroken line\nff\tggggg\t0\n", encoding="utf-8")
    chunks = []

    def encode_lengths(encoder, sequences, batch_size, progress):
        chunks.append([len(ids) - 2 for ids in sequences])
        return np.array([[len(ids) - 2, (len(ids) - 2) ** 2] for ids in sequences], dtype=float)

    monkeypatch.setattr(encoding, "encode_ids", encode_lengths)
    monkeypatch.setattr(encoding, "checked_encoder", lambda value, name="encoder": value)  # a stand-in encoder
    tokenizer = SimpleNamespace(encode=lambda text: ([2] + [5] * len(text) + [3], None))
    config = SimpleNamespace(stages=("model",))  # what a refusal of its vectors blames
    encoder = SimpleNamespace(tokenizer=tokenizer, maxlen=6, config=config)  # "ggggg" is cut to 4 tokens
    files = [str(tmp_path / "s.txt"), str(tmp_path / "p.data")]
    with caplog.at_level(logging.INFO):
        stats = fit_statistics(
            {}, files, functools.partial(encoding.statistics_from_files, encoder, read=ReadOptions(skip_bad_lines=True))
        )
    assert chunks == [[1, 2], [3, 4], [1, 2], [4]]  # one stream across both files
    lengths = np.array([1, 2, 3, 4, 1, 2, 4], dtype=float)
    np.testing.assert_allclose(stats.covariance, np.cov(np.stack([lengths, lengths**2])), rtol=1e-12)
    assert caplog.text.count("were longer than maxlen") == 1
    assert "1 of 7 sentences were longer than maxlen 6 tokens" in caplog.text
    with pytest.raises(ValueError, match=r"p.data:2: expected sentence1<TAB>sentence2"):
        encoding.statistics_from_files(encoder, [str(tmp_path / "p.data")])


def test_evaluate_equals_plain_numpy_9079_for_every_setting():
    encoded = synthetic_encoded()
    everything = np.concatenate([v for first, second, _ in encoded.values() for v in (first, second)])
    requested = [Setting(0), Setting(-1), Setting(3), Setting(3, 0.0, 0.0), Setting(-1, 0.5, 0.5)]
    results, whitening = evaluate(encoded, fit_statistics(encoded), requested)
    counts = [80, 30, 50]
    for setting, result in zip(requested, results, strict=True):
        k = setting.n_components
        assert (result["setting"], result["n_components"]) == (setting.label, 6 if k < 0 else k)
        assert (result["beta"], result["gamma"]) == (setting.beta, setting.gamma)
        assert (result["method"], result["seed"]) == ("whitening" if k else "raw", None)
        assert (result["fit_seconds"] is None) == (k == 0)
        if k:
            shift, kernel, _ = su_9079_kernel(everything, setting.beta, setting.gamma)
            kernel = kernel[:, :k] if k > 0 else kernel
        for split, (first, second, labels) in encoded.items():
            if k:
                first, second = (first - shift) @ kernel, (second - shift) @ kernel
            cosines = (first * second).sum(axis=1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)
            assert abs(result["splits"][split] - spearman(labels, cosines)) < 1e-9, (setting, split)
        values = [result["splits"][split] for split in encoded]
        assert abs(result["avg"] - np.mean(values)) < 1e-12
        assert abs(result["w-avg"] - np.average(values, weights=counts)) < 1e-12
    # the whitening returned for the spectrum is the original one (beta = gamma = 1)
    np.testing.assert_allclose(whitening.eigenvalues, np.linalg.eigvalsh(np.cov(everything.T))[::-1], rtol=1e-9)
    only_raw = evaluate(encoded, fit_statistics(encoded), [Setting(0)])
    assert only_raw[1] is None and only_raw[0][0]["splits"] == results[0]["splits"]
    other = evaluate(encoded, fit_statistics(encoded), [Setting(2, 0.0, 0.0)])[1]
    assert (other.beta, other.gamma) == (0.0, 0.0)
    later = evaluate(
        encoded, fit_statistics(encoded), [Setting(2, 0.0, 0.0), Setting(2, 1.0, 0.5), Setting(2, 0.5, 1.0), Setting(2)]
    )[1]
    assert (later.beta, later.gamma) == (1.0, 1.0)


def test_evaluate_keeps_the_rank_unless_allowed():
    rng = np.random.default_rng(1)
    flat = lambda count: np.c_[rng.normal(size=(count, 3)), np.zeros((count, 2))]  # rank 3 of 5
    encoded = {"test": (flat(40), flat(40), rng.integers(0, 6, 40).astype(float))}
    stats = fit_statistics(encoded)
    results, _ = evaluate(encoded, stats, [Setting(-1)])
    assert results[0]["n_components"] == 3
    with pytest.raises(ValueError, match="n_components 4 is larger than the rank 3"):
        evaluate(encoded, stats, [Setting(4)])
    assert evaluate(encoded, stats, [Setting(-1)], allow_rank_deficient=True)[0][0]["n_components"] == 5


def test_an_undefined_spearman_is_written_as_null_not_nan(tmp_path, caplog):
    import json

    from bert_whitening.evaluation import write_report

    report = {"tasks": {"T": {"results": [{"splits": {"test": float("nan")}, "avg": 0.5, "w-avg": float("inf")}]}}}
    write_report(report, str(tmp_path / "r.json"))

    def refuse(constant):
        raise ValueError("not JSON: %s" % constant)

    written = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"), parse_constant=refuse)
    assert written["tasks"]["T"]["results"][0] == {"splits": {"test": None}, "avg": 0.5, "w-avg": None}
    assert "tasks.T.results[0].splits.test" in caplog.text and "constant labels" in caplog.text


def test_the_table_widens_its_task_column_to_a_long_task_name():
    """A pair file's path as the task pushed every row's figures out of their columns."""
    from bert_whitening.evaluation import format_table

    result = {"setting": "raw", "splits": {"test": 0.5}, "avg": 0.5, "w-avg": 0.5, "fit_seconds": None}
    task = "data/sample/pairs.data"
    lines = format_table(task, {"tasks": {task: {"results": [result], "counts": {"test": 210}}}}).splitlines()
    assert len({len(line) for line in lines}) == 1 and lines[1].startswith(task + " test       210")


def test_each_task_is_cut_to_the_original_maxlen_unless_one_is_given():
    from bert_whitening.evaluation import task_maxlen

    tasks = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B", "STS-B-en", "mine.data")
    assert [task_maxlen(task) for task in tasks] == [64, 64, 64, 128, 64, 64, 64]  # chn/eval.py's
    assert (task_maxlen("PAWSX", 32), task_maxlen("ATEC", 256)) == (32, 256)


def test_fit_on_files_named_all_or_train_is_a_file_only_where_one_exists(tmp_path, monkeypatch):
    from bert_whitening.errors import BertWhiteningError
    from bert_whitening.evaluation import _check_fit_on

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train").write_text("a sentence\n", encoding="utf-8")
    _check_fit_on(["train"], {"T": {"test": []}})  # a file of that name: read as one
    with pytest.raises(BertWhiteningError) as raised:
        _check_fit_on(["train", "all"], {"T": {"test": []}})
    assert str(raised.value) == "--fit-on all is given alone, not among files"


def test_the_table_has_a_row_per_split_then_both_averages_and_the_fit_seconds():
    from bert_whitening.evaluation import format_table

    results = [
        {"setting": "raw", "splits": {"train": 0.1, "test": 0.3}, "avg": 0.2, "w-avg": 0.25, "fit_seconds": None},
        {"setting": "k=8", "splits": {"train": 0.5, "test": -0.7}, "avg": -0.1, "w-avg": 0.05, "fit_seconds": 0.0},
    ]
    report = {"tasks": {"T": {"results": results, "counts": {"train": 10, "test": 30}}}}
    assert format_table("T", report).splitlines() == [
        "task       split    pairs        raw        k=8",
        "T          train       10     0.1000     0.5000",
        "T          test        30     0.3000    -0.7000",
        "T          avg                0.2000    -0.1000",
        "T          w-avg              0.2500     0.0500",
        "T          fit s                   -       0.00",  # a fit that took no measurable time is no raw
    ]


def test_a_report_is_never_written_over_a_file_it_was_made_from(tmp_path):
    from bert_whitening.errors import BertWhiteningError
    from bert_whitening.evaluation import report_inputs, write_report

    (tmp_path / "data" / "T").mkdir(parents=True)
    task, fit_on, distractors = tmp_path / "data" / "T" / "T.test.data", tmp_path / "fit.txt", tmp_path / "d.txt"
    for path in (task, fit_on, distractors):
        path.write_text("a\tb\t1\n", encoding="utf-8")
    one = {"data_dir": str(tmp_path / "data"), "tasks": {"T": {}}, "fit_on": [str(fit_on)]}
    other = {"data_dir": str(tmp_path / "data"), "tasks": {}, "fit_on": "train", "distractor_files": [str(distractors)]}
    assert report_inputs(one) == [str(task), str(fit_on)]
    assert report_inputs({"poolings": [other, one]}) == [str(distractors), str(task), str(fit_on)]
    for path in (task, fit_on, distractors):
        with pytest.raises(BertWhiteningError) as raised:
            write_report({"poolings": [other, one]}, json_path=str(path))
        assert str(raised.value).startswith("cannot write %s: it is the input" % path)
        assert path.read_text(encoding="utf-8") == "a\tb\t1\n"


def test_a_flow_asked_for_without_the_vectors_it_is_trained_on_is_refused_before_training():
    from bert_whitening.errors import BertWhiteningError

    encoded = synthetic_encoded()
    with pytest.raises(BertWhiteningError) as raised:
        evaluate(encoded, fit_statistics(encoded), [Setting(0), Setting(-1, method="flow")])
    assert str(raised.value) == "a flow is trained on the vectors themselves: pass vectors"


def test_a_fit_on_file_not_in_a_list_is_refused_as_such_before_the_model_is_built(
    tiny_model, sample_task, tmp_path, monkeypatch
):
    """The path's characters were taken for files: "/: is a directory, not a file"."""
    from bert_whitening import models
    from bert_whitening.config import EncoderConfig
    from bert_whitening.errors import BertWhiteningError
    from bert_whitening.evaluation import EvalOptions, evaluate_tasks

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("a sentence\n", encoding="utf-8")
    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    with pytest.raises(BertWhiteningError) as raised:
        evaluate_tasks(
            EncoderConfig(model=tiny_model[0]), ["SAMPLE"], EvalOptions(directory=sample_task, fit_on="corpus.txt")
        )
    assert str(raised.value) == "fit_on must be a list of file paths, got str 'corpus.txt' (one file: put it in a list)"


def test_eval_options_keep_their_lists_as_tuples_and_report_fit_on_as_given():
    from bert_whitening.evaluation import EvalOptions

    options = EvalOptions(n_components=[0, -1], betas=[1.0, 0.5], fit_on=["a.txt"], poolings=["cls", "last-avg"])
    assert (options.n_components, options.betas, options.fit_on, options.poolings) == (
        (0, -1),
        (1.0, 0.5),
        ("a.txt",),
        ("cls", "last-avg"),
    )
    assert options.reported_fit_on == ["a.txt"] and EvalOptions(fit_on="train").reported_fit_on == "train"
    assert [setting.label for setting in options.settings] == ["raw", "k=all", "k=all b=0.5 g=1"]
    given = {"epochs": 2}
    flows = EvalOptions(methods=["flow"], flow_options=given)
    given["epochs"] = 3  # the options keep what they were built with
    assert flows.flow_options == {"epochs": 2} and flows.methods == ("flow",)


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"n_components": "0,-1"},
            "n_components must be a list of values, got str '0,-1' (one value: put it in a list)",
        ),
        ({"n_components": [0, 1.5]}, "n_components[1] must be an integer, got float 1.5"),
        ({"n_components": [True]}, "n_components[0] must be an integer, got bool True"),
        ({"betas": [1.0, float("nan")]}, "beta must be a finite number, got nan"),
        ({"gammas": ["1"]}, "gamma must be a finite number, got '1'"),
        (
            {"fit_on": "corpus.txt"},
            "fit_on must be a list of file paths, got str 'corpus.txt' (one file: put it in a list)",
        ),
        ({"fit_on": ["corpus.txt", "all"]}, "--fit-on all is given alone, not among files"),
        ({"directory": 3}, "directory must be a path (str or pathlib.Path), got int 3"),
        ({"read": {"batch_size": 8}}, "read must be a ReadOptions, got dict {'batch_size': 8}"),
        ({"poolings": ["cls", "max"]}, "unknown pooling 'max'; choose one of: first-last-avg, last-avg, cls, pooler"),
        ({"methods": ["glow"]}, "unknown method 'glow' (methods: whitening, flow)"),
        ({"flow_options": [("epochs", 2)]}, "flow_options must be a dict, got list"),
    ],
)
def test_eval_options_refuse_each_value_no_evaluation_can_use_when_built(options, message):
    from bert_whitening.evaluation import EvalOptions

    with pytest.raises(BertWhiteningError) as raised:
        EvalOptions(**options)
    assert str(raised.value) == message


def test_evaluate_tasks_takes_eval_options_alone(monkeypatch):
    from bert_whitening import evaluation
    from bert_whitening.config import EncoderConfig

    monkeypatch.setattr(evaluation, "load_tasks", lambda *args: pytest.fail("the tasks were loaded"))
    with pytest.raises(BertWhiteningError) as raised:
        evaluation.evaluate_tasks(EncoderConfig("unused"), ["STS-B"], {"n_components": [0]})
    assert str(raised.value) == "options must be an EvalOptions, got dict {'n_components': [0]}"


def numpy_code_cosines(codes, first, second, rms):
    """The cosine of each pair's codes from the codes' definitions, in numpy: the signs as +-1
    vectors for binary, for int8 the integers ``round(y / step)`` (clipped at 127, ``step`` 6 of a
    coordinate's spread ``rms`` over 127 and the norm of ``rms``) scaled back by their steps."""
    if codes == "binary":
        return (np.where(first > 0, 1.0, -1.0) * np.where(second > 0, 1.0, -1.0)).mean(axis=1)
    step = 6.0 * rms / (127 * np.linalg.norm(rms))
    a, b = (np.clip(np.rint(side / step), -127, 127) * step for side in (first, second))
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_evaluate_scores_every_setting_in_every_code_as_numpy_computes_the_codes():
    encoded = synthetic_encoded(dim=10)
    everything = np.concatenate([v for first, second, _ in encoded.values() for v in (first, second)])
    requested = [Setting(0), Setting(-1), Setting(3), Setting(5, 0.0, 0.0)]
    codes = ("float32", "int8", "binary")
    results, _ = evaluate(encoded, fit_statistics(encoded), requested, codes=codes)
    assert [(r["setting"], r["codes"]) for r in results] == [(s.label, c) for s in requested for c in codes]
    alone, _ = evaluate(encoded, fit_statistics(encoded), requested)
    assert [r["splits"] for r in results if r["codes"] == "float32"] == [r["splits"] for r in alone]
    for result in results:
        setting = next(s for s in requested if s.label == result["setting"])
        k = {0: 10, -1: 10}.get(setting.n_components, setting.n_components)
        assert result["bytes"] == {"float32": 4 * k, "int8": k, "binary": (k + 7) // 8}[result["codes"]]
        if setting.n_components:
            shift, kernel, _ = su_9079_kernel(everything, setting.beta, setting.gamma)
            project = lambda x, shift=shift, kernel=kernel[:, :k]: (x - shift) @ kernel  # noqa: E731
        else:
            project = lambda x: x  # noqa: E731
        rms = np.sqrt((project(everything) ** 2).mean(axis=0))  # each coordinate's spread over the sample
        for split, (first, second, labels) in encoded.items():
            a, b = (project(x) / np.linalg.norm(project(x), axis=1, keepdims=True) for x in (first, second))
            if result["codes"] == "float32":
                cosines = (a * b).sum(axis=1)
            else:
                cosines = numpy_code_cosines(result["codes"], a, b, rms)
            assert abs(result["splits"][split] - spearman(labels, cosines)) < 1e-9, (result["setting"], split)
    binary = [r for r in results if r["codes"] == "binary"]
    assert all(b["splits"] != f["splits"] for b, f in zip(binary, alone, strict=True))  # codes change the scores


def test_int8_codes_are_refused_beside_a_flow_binary_codes_are_not():
    from bert_whitening.evaluation import EvalOptions

    said = "codes int8 take their scales from a whitening, which a flow has not: drop int8 or the flow"
    with pytest.raises(BertWhiteningError, match="^%s" % said):
        EvalOptions(methods=["whitening", "flow"], codes=["binary", "int8"])
    with pytest.raises(BertWhiteningError, match="^%s" % said):
        evaluate(synthetic_encoded(), fit_statistics(synthetic_encoded()), [Setting(-1, method="flow")], codes=["int8"])
    assert EvalOptions(methods=["flow"], codes="float32,binary").codes == ("float32", "binary")
    assert EvalOptions().codes == ("float32",)


def crafted_rows(valid, test, bytes_, codes="int8", splits=("train", "valid", "test")):
    """Result rows of the given valid and test Spearman and bytes (a train split beside them)."""
    return [
        {
            "setting": "k=%d" % i,
            "codes": codes,
            "n_components": i,
            "bytes": size,
            "splits": {split: {"train": 0.0, "valid": v, "test": t}[split] for split in splits},
        }
        for i, (v, t, size) in enumerate(zip(valid, test, bytes_, strict=True))
    ]


def test_each_byte_budget_chooses_the_best_valid_spearman_within_it_not_the_best_test():
    from bert_whitening.evaluation import budget_choices, format_budgets

    rows = crafted_rows(
        valid=[0.50, 0.60, 0.55, float("nan"), 0.30], test=[0.90, 0.40, 0.45, 0.99, 0.20], bytes_=[1024, 512, 64, 16, 6]
    )
    choices = budget_choices(rows)
    assert [(c["bytes"], c["setting"], c["vector_bytes"], c["valid"], c["test"]) for c in choices] == [
        (1536, "k=1", 512, 0.60, 0.40),  # not k=0, the best test
        (1024, "k=1", 512, 0.60, 0.40),
        (768, "k=1", 512, 0.60, 0.40),
        (512, "k=1", 512, 0.60, 0.40),
        (384, "k=2", 64, 0.55, 0.45),
        (256, "k=2", 64, 0.55, 0.45),
        (128, "k=2", 64, 0.55, 0.45),
        (64, "k=2", 64, 0.55, 0.45),
        (32, "k=4", 6, 0.30, 0.20),  # k=3's valid Spearman is undefined: never chosen
        (16, "k=4", 6, 0.30, 0.20),
        (8, "k=4", 6, 0.30, 0.20),
    ]  # no setting fits in 4 bytes: no row
    assert {c["chosen_on"] for c in choices} == {"valid"} and choices[0]["codes"] == "int8"
    report = {"tasks": {"T": {"budgets": choices}}}
    lines = format_budgets("T", report).splitlines()
    assert lines[0] == "T: the best setting within each byte budget, chosen on its valid split"
    assert lines[1].split() == ["budget", "setting", "codes", "bytes", "valid", "test"]
    assert lines[2].split() == ["1536", "k=1", "int8", "512", "0.6000", "0.4000"] and len(lines) == 2 + 11
    assert format_budgets("T", {"tasks": {"T": {}}}) == ""
    no_valid = budget_choices(crafted_rows([0.1, 0.2], [0.9, 0.1], [8, 8], splits=("train", "test")))
    assert (no_valid[0]["chosen_on"], no_valid[0]["setting"], no_valid[0]["valid"]) == ("train", "k=0", 0.0)
    test_only = budget_choices(crafted_rows([0.1, 0.2], [0.3, 0.7], [8, 8], splits=("test",)))
    assert (test_only[0]["chosen_on"], test_only[0]["setting"], test_only[0]["test"]) == ("test", "k=1", 0.7)


def test_the_table_names_each_columns_codes_and_bytes_when_there_is_another_code():
    from bert_whitening.evaluation import format_table

    results = [
        {"setting": "k=8", "codes": c, "bytes": b, "splits": {"test": 0.5}, "avg": 0.5, "w-avg": 0.5, "fit_seconds": 0}
        for c, b in (("float32", 32), ("binary", 1))
    ]
    lines = format_table("T", {"tasks": {"T": {"results": results, "counts": {"test": 30}}}}).splitlines()
    assert lines[1].split() == ["T", "codes", "float32", "binary"] and lines[2].split() == ["T", "bytes", "32", "1"]
    only_floats = format_table("T", {"tasks": {"T": {"results": results[:1], "counts": {"test": 30}}}})
    assert "codes" not in only_floats and "bytes" not in only_floats
