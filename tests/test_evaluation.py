"""Evaluation against the original eval.py procedure (tests/reference.py: `original_split_vectors`
and `original_scores`)."""

import json
import logging
import os
import pathlib
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

from helpers import synthetic_pairs
from reference import original_scores, original_split_vectors, spearman, su_9079_kernel

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def sample_task(tmp_path_factory):
    """A senteval_cn task SAMPLE with three splits (90/60/60 pairs) over the tiny vocabulary."""
    root = tmp_path_factory.mktemp("senteval")
    (root / "SAMPLE").mkdir()
    lines = ["%s\t%s\t%d\n" % pair for pair in synthetic_pairs(210)]
    for split, part in (("train", lines[:90]), ("valid", lines[90:150]), ("test", lines[150:])):
        (root / "SAMPLE" / ("SAMPLE.%s.data" % split)).write_text("".join(part), encoding="utf-8")
    return str(root)


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


def test_eval_command_writes_table_json_and_plot(tiny_model, sample_task, tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    held_out = tmp_path / "corpus.txt"
    held_out.write_text("".join(a + "\n" + b + "\n" for a, b, _ in synthetic_pairs(210)), encoding="utf-8")
    argv = [
        "eval",
        "--model",
        tiny_model[0],
        "--task",
        "SAMPLE",
        "--data-dir",
        sample_task,
        "--n-components",
        "0,-1,8",
        "--beta",
        "1,0.5",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    ]
    assert cli.main(argv) == 0
    table = capsys.readouterr().out
    assert "SAMPLE     test        60" in table and "w-avg" in table and "k=8 b=0.5 g=1" in table
    report = json.loads(out_json.read_text())
    task = report["tasks"]["SAMPLE"]
    assert task["counts"] == {"train": 90, "valid": 60, "test": 60} and task["fitted_on_vectors"] == 420
    assert [r["setting"] for r in task["results"]] == ["raw", "k=all", "k=all b=0.5 g=1", "k=8", "k=8 b=0.5 g=1"]
    assert report["model"]["name"] == "tiny_bert" and report["seconds"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.main(argv[:-4] + ["--fit-on", "train", "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["tasks"]["SAMPLE"]["fitted_on_vectors"] == 180
    assert cli.main(argv[:-4] + ["--fit-on", str(held_out), "--json", str(out_json)]) == 0
    from_file = json.loads(out_json.read_text())["tasks"]["SAMPLE"]
    assert from_file["fitted_on_vectors"] == 420
    np.testing.assert_allclose(
        from_file["results"][1]["splits"]["test"], task["results"][1]["splits"]["test"], atol=1e-6
    )  # same sentences


def test_a_pair_file_given_as_the_task_is_scored_as_the_test_split_of_a_task_of_its_own(
    tiny_model, sample_task, tmp_path, caplog
):
    """A user's pair file had to be copied into a senteval_cn layout first (DIR/T/T.test.data)."""
    mine = tmp_path / "mine.data"
    mine.write_bytes((pathlib.Path(sample_task) / "SAMPLE" / "SAMPLE.test.data").read_bytes())
    as_task, as_file = tmp_path / "task.json", tmp_path / "file.json"
    common = ["eval", "--model", tiny_model[0], "--n-components", "0,8"]
    test_split = ["--fit-on", str(pathlib.Path(sample_task) / "SAMPLE" / "SAMPLE.test.data")]  # what mine's "all" is
    assert cli.main([*common, *test_split, "--task", "SAMPLE", "--data-dir", sample_task, "--json", str(as_task)]) == 0
    assert cli.main([*common, "--task", str(mine), "--data-dir", str(tmp_path / "none"), "--json", str(as_file)]) == 0
    expected, scored = json.loads(as_task.read_text())["tasks"]["SAMPLE"], json.loads(as_file.read_text())["tasks"]
    assert list(scored) == [str(mine)] and scored[str(mine)]["counts"] == {"test": 60}
    for mine_result, task_result in zip(scored[str(mine)]["results"], expected["results"], strict=True):
        assert mine_result["splits"]["test"] == pytest.approx(task_result["splits"]["test"], abs=1e-6)
    assert cli.main([*common, "--task", str(mine), "--json", str(mine)]) == 1  # an input: never written over
    assert "cannot write %s: it is the input %s" % (mine, mine) in caplog.text
    assert cli.main([*common, "--fit-on", "train", "--task", str(mine)]) == 1
    assert "--fit-on train: %s has no train split (splits: test)" % mine in caplog.text
    assert cli.main([*common, "--task", "sample", "--data-dir", sample_task]) == 1
    assert (
        "sample: no sample.{train,valid,test}.data under %s (tasks there: SAMPLE; a pair"  # a task of the user's
        % (pathlib.Path(sample_task) / "sample")
        in caplog.text
    )


def test_eval_scores_several_poolings_on_one_pass_as_each_alone(tiny_model, sample_task, tmp_path, capsys, caplog):
    """Each pooling's report as its own run gives it, from one pass over the task's sentences;
    the held-out file's whitening statistics are each pooling's own."""
    out = tmp_path / "r.json"
    held_out = tmp_path / "corpus.txt"
    held_out.write_text("".join(a + "\n" + b + "\n" for a, b, _ in synthetic_pairs(50, seed=1)), encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task, "--n-components", "0,-1,8"]
    argv += ["--fit-on", str(held_out), "--json", str(out)]
    alone = {}
    for pooling in ("cls", "first-last-avg"):
        assert cli.main(argv + ["--pooling", pooling]) == 0
        alone[pooling] = json.loads(out.read_text())["tasks"]["SAMPLE"]
    capsys.readouterr()
    widths = []
    run_batches = encoding._run_batches
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            encoding,
            "_run_batches",
            lambda encoder, *rest: widths.append(encoder.dim) or run_batches(encoder, *rest),
        )
        caplog.set_level(logging.INFO, logger="bert_whitening")
        assert cli.main(argv + ["--pooling", "cls,first-last-avg,cls"]) == 0
    assert widths == [48, 48]  # the task's sentences, then the held-out file, each once for both
    assert "SAMPLE, first-last-avg pooling: fitting and scoring" in caplog.text
    printed = capsys.readouterr().out
    assert 0 <= printed.index("cls pooling\n") < printed.index("first-last-avg pooling\n")
    reports = json.loads(out.read_text())["poolings"]
    assert [report["pooling"] for report in reports] == ["cls", "first-last-avg"]
    for report in reports:
        got, expected = report["tasks"]["SAMPLE"], alone[report["pooling"]]
        assert (got["rank"], got["fitted_on_vectors"]) == (expected["rank"], 100)
        assert [r["setting"] for r in got["results"]] == [r["setting"] for r in expected["results"]]
        for mine, theirs in zip(got["results"], expected["results"], strict=True):
            for split, value in theirs["splits"].items():
                assert abs(mine["splits"][split] - value) <= 1e-3, (report["pooling"], mine["setting"], split)
    plot = tmp_path / "p.png"
    assert cli.main(argv + ["--pooling", "cls,pooler", "--plot", str(plot)]) == 1
    assert "--plot draws one pooling: give one --pooling, or leave --plot out" in caplog.text
    assert not plot.exists()


def test_fit_on_train_without_a_train_split_is_an_error(tiny_model, sample_task, tmp_path, caplog, monkeypatch):
    """Refused before the model is built: after it, the refusal came once every split was encoded."""
    from bert_whitening import models

    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    os.remove(tmp_path / "SAMPLE" / "SAMPLE.train.data")
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", str(tmp_path)]
    monkeypatch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
    assert cli.main(argv + ["--fit-on", "train", "--n-components", "0,-1,8"]) == 1
    assert "--fit-on train: SAMPLE has no train split (splits: valid, test)" in caplog.text
    for fit_on, said in (
        (["all", "train"], "--fit-on all is given alone, not among files"),
        (["nosuch"], "nosuch: no such"),
    ):
        assert cli.main(argv + ["--fit-on", *fit_on, "--n-components", "0,8"]) == 1
        assert said in caplog.text
    monkeypatch.undo()
    assert cli.main(argv + ["--n-components", "0,25"]) == 1  # refused before anything is encoded
    assert "n_components 25 is larger than the model's hidden size 24" in caplog.text
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    for methods in ("whitening", "whitening,flow"):  # the fit's "needs at least 2 vectors" named the task
        assert cli.main(argv + ["--fit-on", str(empty), "--n-components", "0,-1", "--method", methods]) == 1
        assert caplog.messages[-1] == "SAMPLE: --fit-on %s: no sentences in it" % empty


@pytest.mark.parametrize(
    "content, said", [("e\tf\t1\ng\th\t1\n", ":1-2: every label is 1"), ("", ": the evaluation file holds no pairs")]
)
def test_a_split_with_nothing_to_correlate_is_refused_naming_its_file(
    tiny_model, sample_task, tmp_path, caplog, content, said
):
    """All labels equal, or no pair: no Spearman (scipy gave NaN with a warning and eval exited
    0). Refused before the model is built, naming the file."""
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    path = tmp_path / "SAMPLE" / "SAMPLE.test.data"
    path.write_text(content, encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", str(tmp_path), "--n-components", "8"]
    assert cli.main(argv) == 1
    assert str(path) + said in caplog.text


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


def test_eval_beta_0_gamma_0_reproduces_kexue_9079(tiny_model, encoders, sample_task, tmp_path):
    """9079's setting without centring: Sigma is the raw second moment, not the covariance."""
    out = tmp_path / "r.json"
    assert (
        cli.main(
            [
                "eval",
                "--model",
                tiny_model[0],
                "--task",
                "SAMPLE",
                "--data-dir",
                sample_task,
                "--n-components",
                "8",
                "--beta",
                "0",
                "--gamma",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    (result,) = json.loads(out.read_text())["tasks"]["SAMPLE"]["results"]
    splits = load_task("SAMPLE", sample_task)
    vectors = {
        split: [
            encode(encoders["first-last-avg"], [pair[side] for pair in pairs]).astype(np.float64) for side in (0, 1)
        ]
        for split, pairs in splits.items()
    }
    shift, kernel, _ = su_9079_kernel(np.concatenate(sum(vectors.values(), [])), 0.0, 0.0)
    for split, (first, second) in vectors.items():
        first, second = ((v - shift) @ kernel[:, :8] for v in (first, second))
        cosines = (first * second).sum(axis=1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)
        expected = spearman([label for _, _, label in splits[split]], cosines)
        assert abs(result["splits"][split] - expected) <= 1e-3, (split, result["splits"][split], expected)


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
    import logging
    from types import SimpleNamespace

    from bert_whitening import encoding

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


def test_eval_scores_flows_beside_whitenings_on_one_encoding(tiny_model, sample_task, tmp_path, capsys):
    import json

    out_json = tmp_path / "r.json"
    argv = [
        "eval",
        "--model",
        tiny_model[0],
        "--task",
        "SAMPLE",
        "--data-dir",
        sample_task,
        "--n-components",
        "0,-1",
        "--method",
        "whitening,flow",
        "--flow-seeds",
        "0,1",
        "--json",
        out_json,
    ]
    assert cli.main([str(a) for a in argv]) == 0
    results = json.loads(out_json.read_text())["tasks"]["SAMPLE"]["results"]
    assert [(r.get("method"), r.get("seed")) for r in results][1:] == [("whitening", None), ("flow", 0), ("flow", 1)]
    flows = [r["splits"]["test"] for r in results if r.get("method") == "flow"]
    assert flows[0] != flows[1] and all(-1 <= value <= 1 for value in flows)
    with pytest.raises(SystemExit):
        cli.main([str(a) for a in argv[:-2]] + ["--method", "whitening,umap"])


def test_a_later_task_that_fails_keeps_the_earlier_tables_and_is_named(
    tiny_model, sample_task, tmp_path, capsys, caplog
):
    """A rank below k on the second task's data was one line naming no task, and the first
    task's scores were lost: each task's table is printed as it is done."""
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    (tmp_path / "SMALL").mkdir()
    lines = "".join("%s\t%s\t%d\n" % pair for pair in synthetic_pairs(3))
    (tmp_path / "SMALL" / "SMALL.test.data").write_text(lines, encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--data-dir", str(tmp_path), "--n-components", "0,8"]
    assert cli.main(argv + ["--task", "SAMPLE", "--task", "SMALL"]) == 1
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:3] == ["task", "split", "pairs"] and "SAMPLE     test" in printed
    assert "ERROR    bert_whitening:cli.py" in caplog.text
    assert "SMALL: n_components 8 is larger than the rank" in caplog.text


def test_a_failure_after_an_output_was_written_says_so(tiny_model, sample_task, tmp_path, caplog, monkeypatch):
    """--json written, then --plot failed: the error line said nothing of the JSON in place."""
    import errno

    from bert_whitening import plots

    def full(*arguments):
        raise OSError(errno.ENOSPC, "cannot write %s: No space left on device" % (tmp_path / "r.png"))

    monkeypatch.setattr(plots, "plot_report", full)
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task, "--n-components", "0,8"]
    assert cli.main(argv + ["--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]) == 1
    assert "r.png: No space left on device (%s written in full before it)" % (tmp_path / "r.json") in caplog.text
    assert (tmp_path / "r.json").exists() and not (tmp_path / "r.png").exists()


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


def test_the_model_is_checked_against_the_longest_maxlen_its_tasks_need(tiny_model, sample_task, tmp_path, caplog):
    """PAWSX's 128 tokens beside another task's 64, on a model of 64 positions: refused before
    the model is built, not checked at the shorter one."""
    from bert_whitening import models

    for task in ("SAMPLE", "PAWSX"):
        shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / task)
        for split in ("train", "valid", "test"):
            os.rename(tmp_path / task / ("SAMPLE.%s.data" % split), tmp_path / task / ("%s.%s.data" % (task, split)))
    argv = ["eval", "--model", tiny_model[0], "--data-dir", str(tmp_path), "--task", "SAMPLE", "--task", "PAWSX"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "build", lambda *arguments, **options: pytest.fail("the model was built"))
        assert cli.main(argv + ["--n-components", "0,8"]) == 1
    assert "maxlen 128 is larger than the 64 positions of" in caplog.text


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
