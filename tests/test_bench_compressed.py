"""``benchmarks/bench_compressed.py``'s own logic, on small vectors (no model, no peer): our settings
scored as ``eval`` scores them, the setting chosen within a byte budget on the split each side is
read on, and the issue's targets decided at their thresholds."""

import importlib.util
import os

import numpy as np
import pytest
import scipy.stats

from bert_whitening.evaluation import BUDGETS, Setting, evaluate, fit_statistics
from bert_whitening.retrieval.benchmark import recall_against_exact

from helpers import ROOT

spec = importlib.util.spec_from_file_location(
    "bench_compressed", os.path.join(ROOT, "benchmarks", "bench_compressed.py")
)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

DIM = 40  #: the ks of `bench.DIMENSIONS` up to it are scored


@pytest.fixture(scope="module")
def encoded():
    """``{split: (first, second, labels)}`` of anisotropic vectors whose labels follow the pairs'
    cosine after the mean is removed, as pooled vectors and their scores do."""
    rng = np.random.default_rng(0)
    scale, mean = np.linspace(3.0, 0.1, DIM), rng.normal(size=DIM) * 2
    found = {}
    for split, count in (("valid", 150), ("test", 120)):
        first = rng.normal(size=(count, DIM)) * scale
        second = first * rng.uniform(0, 1, size=(count, 1)) + rng.normal(size=(count, DIM)) * scale
        labels = np.round(4 * (first * second).sum(1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1))
        found[split] = (first + mean, second + mean, labels)
    return found


@pytest.fixture(scope="module")
def results(encoded):
    return bench.our_results(encoded)


def result(setting, size, valid, test, codes="int8"):
    return {
        "setting": setting,
        "codes": codes,
        "n_components": 8,
        "bytes": size,
        "splits": {"valid": valid, "test": test},
    }


def test_our_settings_are_evals_every_code_at_each_k_up_to_the_rank(encoded, results):
    requested = [Setting(0)] + [
        Setting(k, beta, gamma) for beta, gamma in bench.BETA_GAMMA for k in bench.DIMENSIONS if k <= DIM
    ]
    scored, _ = evaluate(encoded, fit_statistics(encoded, "all"), requested, codes=("float32", "int8", "binary"))
    timeless = lambda found: [{key: value for key, value in r.items() if key != "fit_seconds"} for r in found]
    assert timeless(results) == timeless(scored)
    assert len(results) == 3 * (1 + len(bench.BETA_GAMMA) * 4)  # raw and k = 32, 16, 8, 4, in three codes


def test_no_k_above_the_covariances_rank_is_scored(encoded):
    def rank_24(vectors):  # 24 columns vary; the other 16 repeat the first
        return np.concatenate([vectors[:, :24], np.repeat(vectors[:, :1], DIM - 24, axis=1)], axis=1)

    narrow = {split: (rank_24(a), rank_24(b), labels) for split, (a, b, labels) in encoded.items()}
    assert {r["n_components"] for r in bench.our_results(narrow)} == {0, 16, 8, 4}


def test_binary_scores_the_sign_agreement_of_the_whitened_vectors(encoded, results):
    from bert_whitening.whitening import fit_whitening

    whitening = fit_whitening(fit_statistics(encoded, "all"), beta=1.0, gamma=0.5)
    first, second, labels = encoded["test"]
    signs = np.sign(whitening.transform(first, 16)) * np.sign(whitening.transform(second, 16))
    (found,) = [r for r in results if (r["n_components"], r["gamma"], r["codes"]) == (16, 0.5, "binary")]
    assert found["splits"]["test"] == pytest.approx(scipy.stats.spearmanr(labels, signs.mean(axis=1)).correlation)
    assert found["bytes"] == 2


def test_ours_is_chosen_on_valid_and_the_peer_on_test():
    ours = [result("ours valid", 32, 0.6, 0.40), result("ours test", 32, 0.5, 0.45)]
    peer = [result("peer valid", 32, 0.9, 0.30), result("peer test", 16, 0.1, 0.35), result("peer", 4, 0.1, 0.1)]
    rows = {row["budget"]: row for row in bench.side_by_side(ours, peer)}
    assert [budget for budget in rows] == list(BUDGETS)
    row = rows[32]
    assert (row["ours"]["setting"], row["peer"]["setting"]) == ("ours valid", "peer test")
    assert (row["ours"]["valid"], row["ours"]["test"], row["peer"]["test"]) == (0.6, 0.40, 0.35)
    assert row["difference"] == pytest.approx(0.40 - 0.35)
    assert rows[8]["peer"]["setting"] == rows[4]["peer"]["setting"] == "peer"
    empty = rows[16]
    assert empty["ours"] is None and empty["difference"] is None
    lines = bench.format_table("T", [row, empty]).splitlines()
    assert "ours-peer" in lines[1]
    assert lines[2].split() == ["32", "ours", "valid", "int8", "0.6000", "0.4000", "|"] + [
        "peer",
        "test",
        "int8",
        "0.3500",
        "|",
        "+0.0500",
    ]
    assert lines[3].split() == ["16", "-", "-", "-", "|", "peer", "test", "int8", "0.3500", "|", "-"]


def table(differences):
    """Side-by-side rows at the checked budgets with these differences (ours minus the peer's)."""
    return [
        {"budget": budget, "ours": {}, "peer": {}, "difference": difference}
        for budget, difference in zip(bench.CHECKED_BUDGETS, differences, strict=True)
    ]


def coded(float32, int8, binary, k=bench.BINARY_K):
    return [
        {"n_components": k, "beta": 1.0, "gamma": 1.0, "codes": codes, "splits": {"test": score}}
        for codes, score in (("float32", float32), ("int8", int8), ("binary", binary))
    ]


def verdicts(tables, ours):
    return {
        (target.split(" at ")[0].split(",")[0], task): met for target, task, _, met in bench.check_targets(tables, ours)
    }


def test_each_target_is_met_at_its_threshold_and_not_beyond_it():
    at = [-bench.TOLERANCE, 0.0, bench.MARGIN, 0.1, 0.2]  # 32 bytes is the fourth checked budget
    assert bench.CHECKED_BUDGETS[3] == bench.MARGIN_BUDGET
    ours = {"STS-B": coded(0.5, 0.5 - 0.0019, 0.5 * bench.BINARY_SHARE), "ATEC": coded(0.5, 0.49, 0.4)}
    found = verdicts({"STS-B": table(at), "ATEC": table([0.0, -0.0051, 0.0, 0.0, 0.0])}, ours)
    assert found == {
        ("ours >= peer - 0.005", "STS-B"): True,
        ("ours >= peer + 0.05", "STS-B"): True,
        ("ours >= peer - 0.005", "ATEC"): False,
        ("int8 within 0.002 of float32", "STS-B"): True,
        ("int8 within 0.002 of float32", "ATEC"): False,
        ("binary >= 90% of float32", "STS-B"): True,
        ("binary >= 90% of float32", "ATEC"): False,
    }
    found = verdicts({"STS-B": table([0.0, 0.0, 0.049, 0.0, 0.0])}, {})
    assert found[("ours >= peer + 0.05", "STS-B")] is False


def test_only_the_checked_budgets_count_for_the_tolerance():
    rows = table([0.0] * 5) + [{"budget": 8, "ours": {}, "peer": {}, "difference": -1.0}]
    assert verdicts({"LCQMC": rows}, {})[("ours >= peer - 0.005", "LCQMC")] is True


def test_an_int8_gain_is_no_loss_and_the_worst_setting_decides():
    ours = coded(0.5, 0.6, 0.5) + coded(0.4, 0.399, 0.4, k=32)
    assert verdicts({}, {"T": ours})[("int8 within 0.002 of float32", "T")] is True
    ours += coded(0.4, 0.397, 0.4, k=16)
    assert verdicts({}, {"T": ours})[("int8 within 0.002 of float32", "T")] is False


def test_the_peers_settings_are_its_dimension_and_precision_in_its_rows_bytes():
    sizes = {
        precision: bench.peer_result({"dim": 100, "precision": precision, "splits": {}})["bytes"]
        for precision in bench.PEER_PRECISIONS
    }
    assert sizes == {"float32": 400, "int8": 100, "uint8": 100, "binary": 13, "ubinary": 13}
    found = bench.peer_result({"dim": 64, "precision": "ubinary", "splits": {"test": 0.5}})
    assert bench.label(found) == "d=64 ubinary" and found["splits"] == {"test": 0.5}


def test_the_figure_draws_each_systems_test_spearman_against_the_budgets():
    rows = bench.side_by_side(
        [result("ours", 4, 0.5, 0.45), result("ours", 32, 0.6, 0.55)], [result("peer", 16, 0.1, 0.3)]
    )
    figure = bench.side_by_side_figure({"T": rows, "U": rows})
    assert len(figure.axes) == 2
    ours, peer = figure.axes[0].get_lines()
    assert list(ours.get_xdata()) == list(BUDGETS)
    assert list(ours.get_ydata()) == [0.55] * (len(BUDGETS) - 3) + [0.45] * 3
    assert list(peer.get_xdata()) == list(BUDGETS[:-2]) and list(peer.get_ydata()) == [0.3] * (len(BUDGETS) - 2)
    assert figure.axes[0].get_xscale() == "log"


def search(k, codes, ids, qps, size, cosines=None):
    cosines = cosines or [[1.0 - 0.1 * rank for rank in range(len(row))] for row in ids]
    entry = {"k": k, "codes": codes, "ids": ids, "cosines": cosines, "qps": qps, "index_bytes": size}
    return dict(entry, rescore_bytes=0, candidates=None)


def test_each_search_is_read_against_the_float32_search_of_its_k():
    searches = {
        "k=2 float32": search(2, "float32", [[1, 2], [3, 4]], 100.0, 320, [[0.9, 0.8], [0.7, 0.6]]),
        "k=2 binary": search(2, "binary", [[2, 9], [3, 4]], 150.0, 10, [[0.8, 0.5], [0.7, 0.6]]),
        "k=4 float32": search(4, "float32", [[2, 9], [5, 6]], 50.0, 640, [[0.5, 0.4], [0.3, 0.2]]),
        "k=4 binary": search(4, "binary", [[2, 9], [5, 7]], 40.0, 40, [[0.5, 0.4], [0.3, 0.1]]),
    }
    rows = {row["search"]: row for row in bench.retrieval_rows("ours", searches)}
    assert rows["k=2 float32"]["recall@10"] == 1.0 and rows["k=2 float32"]["memory_vs_float32"] == 1.0
    assert rows["k=2 binary"]["recall@10"] == 0.75  # 9's cosine is below 0.8; 3 and 4 found
    assert (rows["k=2 binary"]["qps_vs_float32"], rows["k=2 binary"]["memory_vs_float32"]) == (1.5, 10 / 320)
    assert rows["k=4 binary"]["recall@10"] == 0.75 and rows["k=4 binary"]["memory_vs_float32"] == 1 / 16
    checks = {(target.split(" ")[0], name): met for target, name, _, met in bench.retrieval_checks(list(rows.values()))}
    assert checks == {
        ("recall@10", "ours k=2 binary"): False,
        ("searched", "ours k=2 binary"): True,
        ("queries/s", "ours k=2 binary"): True,
        ("recall@10", "ours k=4 binary"): False,
        ("searched", "ours k=4 binary"): True,
        ("queries/s", "ours k=4 binary"): False,
    }
    assert "k=4 binary" in bench.format_retrieval(list(rows.values())).splitlines()[4]


def test_the_recall_and_memory_targets_hold_at_their_thresholds():
    exact = [[1.0 - 0.01 * rank for rank in range(10)]] * 100
    found = exact[:99] + [exact[0][:9] + [0.5]]
    assert recall_against_exact(found, exact) == pytest.approx(0.999)
    missed = [[0.5] * 10]
    rows = bench.retrieval_rows(
        "peer",
        {
            "f": search(8, "float32", [list(range(10))] * 100, 1.0, 16 * 100, exact),
            "b": search(8, "ubinary", [list(range(10))] * 100, 1.0, 100, exact[:97] + missed * 3),
            "c": search(8, "ubinary", [list(range(10))] * 100, 1.0, 101, exact[:96] + missed * 4),
        },
    )
    verdict = {(target.split(" ")[0], name): met for target, name, _, met in bench.retrieval_checks(rows)}
    assert verdict[("recall@10", "peer b")] and verdict[("searched", "peer b")] and verdict[("queries/s", "peer b")]
    assert not verdict[("recall@10", "peer c")] and not verdict[("searched", "peer c")]


def test_the_queries_are_drawn_from_the_sentences_and_left_out_of_the_corpus(tmp_path, monkeypatch):
    for task, pairs in (("ATEC", [("a", "b"), ("c", "d")]), ("STS-B", [("d", "e"), ("f", "g"), ("h", "i")])):
        (tmp_path / task).mkdir()
        (tmp_path / task / ("%s.test.data" % task)).write_text("".join("%s\t%s\t1\n" % pair for pair in pairs))
    monkeypatch.setattr(bench, "SENTEVAL", str(tmp_path))
    args = type("Args", (), {"tasks": ["ATEC", "STS-B"], "sentences": None, "queries": 3})
    corpus, queries = bench.retrieval_sentences(args)
    assert len(queries) == 3 and not set(queries) & set(corpus)
    assert sorted(corpus + queries) == list("abcdefghi")  # "d" of both tasks once
    assert bench.retrieval_sentences(args) == (corpus, queries)
    args.sentences = 4
    corpus, queries = bench.retrieval_sentences(args)
    assert sorted(corpus + queries) == list("abcd")


def test_our_index_directories_search_exactly_and_rescore_codes_by_the_float_vectors(tmp_path):
    from bert_whitening.config import EncoderConfig

    rng = np.random.default_rng(3)
    unit = rng.normal(size=(500, 384))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    asked = unit[:20] + rng.normal(size=(20, 384)) * 0.05
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    exact = np.argsort(-(asked @ unit.T), axis=1)[:, : bench.TOP_K].tolist()
    config = EncoderConfig("minilm", pooling="last-avg", normalize=True)
    args = type("Args", (), {"rescore": [4, 50], "repeats": 1})
    found = bench.our_index_searches(config, (unit, asked), "float32", args, str(tmp_path))
    found.update(bench.our_index_searches(config, (unit, asked), "binary", args, str(tmp_path)))
    assert list(found) == ["raw float32", "raw binary x4", "raw binary x50"]
    assert found["raw float32"]["ids"] == exact
    assert found["raw binary x50"]["ids"] == exact  # every row a candidate: the float vectors rank them
    exact_cosines = np.take_along_axis(asked @ unit.T, np.asarray(exact), axis=1)
    for entry in found.values():
        np.testing.assert_allclose(
            entry["cosines"], np.take_along_axis(asked @ unit.T, np.asarray(entry["ids"]), 1), atol=1e-6
        )
    assert recall_against_exact(found["raw binary x50"]["cosines"], exact_cosines.tolist()) == 1.0
    assert recall_against_exact(found["raw binary x4"]["cosines"], exact_cosines.tolist()) < 1
    assert [(f["index_bytes"], f["rescore_bytes"], f["candidates"]) for f in found.values()] == [
        (500 * 384 * 4, 0, None),
        (500 * 48, 500 * 384 * 4, 40),
        (500 * 48, 500 * 384 * 4, 500),
    ]
