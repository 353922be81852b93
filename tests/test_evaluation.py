"""Evaluation against the original eval.py procedure (tests/reference.py `original_eval`)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_whitening import cli
from bert_whitening.backend import Tokenizer, build_transformer_model
from bert_whitening.checkpoints import find_model
from bert_whitening.data import load_task
from bert_whitening.encoding import encode
from bert_whitening.evaluation import Setting, encode_splits, evaluate, fit_statistics, settings
from bert_whitening.names import POOLINGS

from helpers import TINY_VOCAB
from reference import original_eval

ROOT = os.path.join(os.path.dirname(__file__), "..")


def synthetic_pairs(count, seed=0):
    """Pairs over the tiny vocabulary: a random sentence and a copy with m random token edits,
    labelled 5 - m. Every sentence distinct, so there are no cosine ties to break by noise."""
    rng = np.random.default_rng(seed)
    words = [t for t in TINY_VOCAB[5:] if not t.startswith("##")]
    pairs, seen = [], set()
    while len(pairs) < count:
        first = list(rng.choice(words, size=rng.integers(4, 14)))
        edits = int(rng.integers(0, 6))
        second = list(first)
        for position in rng.choice(len(second), size=min(edits, len(second)), replace=False):
            second[position] = rng.choice(words)
        a, b = " ".join(first), " ".join(second)
        if a != b and a not in seen and b not in seen:
            seen.update((a, b))
            pairs.append((a, b, 5 - edits))
    return pairs


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


@pytest.mark.parametrize("pooling", POOLINGS)
def test_tiny_model_equals_the_original_procedure(encoders, tiny_model, sample_task, pooling):
    files = find_model(tiny_model[0])
    bert = build_transformer_model(None, files.weights, with_pool="linear" if pooling == "pooler"
                                   else False, **files.config)
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    splits = load_task("SAMPLE", sample_task)
    ours_by_k = {k: package_eval(encoders[pooling], splits, k) for k in (0, -1, 16)}
    rank = ours_by_k[16][1].rank
    original = original_eval(bert, tokenizer, splits, pooling, [0, rank, 16])
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
    argv = ["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir", sample_task,
            "--n-components", "0,-1,8", "--beta", "1,0.5", "--json", str(out_json), "--plot", str(out_png)]
    assert cli.main(argv) == 0
    table = capsys.readouterr().out
    assert "SAMPLE     test        60" in table and "w-avg" in table and "k=8 b=0.5 g=1" in table
    report = json.loads(out_json.read_text())
    task = report["tasks"]["SAMPLE"]
    assert task["counts"] == {"train": 90, "valid": 60, "test": 60} and task["fitted_on_vectors"] == 420
    assert [r["setting"] for r in task["results"]] == ["raw", "k=all", "k=all b=0.5 g=1", "k=8",
                                                       "k=8 b=0.5 g=1"]
    assert report["model"]["name"] == "tiny_bert" and report["seconds"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert cli.main(argv[:-4] + ["--fit-on", "train", "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["tasks"]["SAMPLE"]["fitted_on_vectors"] == 180
    assert cli.main(argv[:-4] + ["--fit-on", str(held_out), "--json", str(out_json)]) == 0
    from_file = json.loads(out_json.read_text())["tasks"]["SAMPLE"]
    assert from_file["fitted_on_vectors"] == 420
    np.testing.assert_allclose(from_file["results"][1]["splits"]["test"],
                               task["results"][1]["splits"]["test"], atol=1e-6)  # same sentences


def test_fit_on_train_without_a_train_split_is_an_error(tiny_model, sample_task, tmp_path, caplog):
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), tmp_path / "SAMPLE")
    os.remove(tmp_path / "SAMPLE" / "SAMPLE.train.data")
    assert cli.main(["eval", "--model", tiny_model[0], "--task", "SAMPLE", "--data-dir",
                     str(tmp_path), "--fit-on", "train"]) == 1
    assert "this task has no train split (splits: valid, test)" in caplog.text


def test_original_command_line_prints_the_original_lines(tiny_model, sample_task, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    os.symlink(tiny_model[0], root / "chinese_L-12_H-768_A-12")
    task_dir = tmp_path / "data"
    shutil.copytree(os.path.join(sample_task, "SAMPLE"), task_dir / "STS-B")
    for split in ("train", "valid", "test"):
        os.rename(task_dir / "STS-B" / ("SAMPLE.%s.data" % split), task_dir / "STS-B" / ("STS-B.%s.data" % split))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "eval", "eval.py"), "BERT",
                             "first-last-avg", "STS-B", "-1", "--model-root", str(root),
                             "--data-dir", str(task_dir)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == ["STS-B-train", "STS-B-valid", "STS-B-test",
                                                       "avg", "w-avg"]
    values = [float(line.split(": ")[1]) for line in lines]
    assert abs(values[3] - np.mean(values[:3])) < 1e-12
    assert abs(values[4] - np.average(values[:3], weights=[90, 60, 60])) < 1e-12
    out = tmp_path / "modern.json"
    assert cli.main(["eval", "--model", tiny_model[0], "--task", "STS-B", "--data-dir",
                     str(task_dir), "--n-components", "-1", "--json", str(out)]) == 0
    modern = json.loads(out.read_text())["tasks"]["STS-B"]["results"][0]
    expected = list(modern["splits"].values()) + [modern["avg"], modern["w-avg"]]
    np.testing.assert_allclose(values, expected, atol=1e-6)  # the two commands agree
