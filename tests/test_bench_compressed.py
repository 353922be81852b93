"""``benchmarks/bench_compressed.py``'s own logic, on small vectors (no model, no peer): our settings
scored as ``eval`` scores them, the setting chosen within a byte budget on the split each side is
read on, and the issue's targets decided at their thresholds."""

import importlib.util
import os

import numpy as np
import pytest
import scipy.stats

from bert_whitening.evaluation import BUDGETS, Setting, evaluate, fit_statistics

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
