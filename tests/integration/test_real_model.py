"""The package on the real all-MiniLM-L6-v2 against a plain re-implementation of the original
procedure (tests/reference.py), on the Chinese STS-B test split of ../shared/data, the
whitening fitted on it (all three splits would add minutes to CI and test nothing more)."""

import numpy as np
import pytest

from bert_whitening.backend import Tokenizer, build_transformer_model
from bert_whitening.checkpoints import find_model
from bert_whitening.data import load_task
from bert_whitening.evaluation import Setting, encode_splits_together, evaluate, fit_statistics
from bert_whitening.models import build_encoders
from bert_whitening.names import POOLINGS

from helpers import shared_data
from reference import original_scores, original_split_vectors, spearman, su_9079_kernel

# One xdist group: its module fixtures (the original procedure over the split, the longest) are
# built on one worker, and `--dist loadgroup` starts the largest group first.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("real_model")]


@pytest.fixture(scope="module")
def sts_b():
    splits = load_task("STS-B", shared_data("senteval_cn"))
    return {"test": splits["test"]}


@pytest.fixture(scope="module")
def original_vectors(sts_b):
    """The original procedure's vectors of every pooling, from one bert4keras model (built with
    the pooler) in one pass: ``{split: ({pooling: first}, {pooling: second})}``."""
    files = find_model("minilm")  # a Hugging Face directory: bert4keras loads a dict of its arrays
    bert = build_transformer_model(None, dict(files.variables), with_pool="linear", **files.config)
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    return original_split_vectors(bert, tokenizer, sts_b, tuple(POOLINGS))


@pytest.fixture(scope="module")
def ours(sts_b):
    """``{pooling: {split: (first, second, labels)}}``: the package's unwhitened encodings of the
    split, every pooling from one forward pass (`build_encoders`, `encode_splits_together`)."""
    return encode_splits_together(build_encoders("minilm", poolings=POOLINGS), sts_b)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_vectors_equal_bert4keras_graph_on_chinese_sts_b(original_vectors, ours, pooling):
    """Ours run `bert_whitening.layers.FusedBert`; the original, bert4keras' own graph."""
    for split, (first, second) in original_vectors.items():
        np.testing.assert_allclose(ours[pooling][split][0], first[pooling], rtol=0, atol=1e-5)
        np.testing.assert_allclose(ours[pooling][split][1], second[pooling], rtol=0, atol=1e-5)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_eval_equals_the_original_procedure_on_chinese_sts_b(sts_b, original_vectors, ours, pooling):
    encoded = ours[pooling]
    results, whitening = evaluate(encoded, fit_statistics(encoded), [Setting(k) for k in (0, -1, 256)])
    # first-last-avg mixes two LayerNorm outputs; the others have null directions (see
    # tests/test_evaluation.py), where "all" keeps the real ones.
    assert (whitening.rank == 384) == (pooling == "first-last-avg"), whitening.rank
    vecs = {split: (first[pooling], second[pooling]) for split, (first, second) in original_vectors.items()}
    original = original_scores(vecs, sts_b, [0, whitening.rank, 256])
    for result in results:
        k = result["n_components"]
        scores, avg, weighted = original[k]
        for split in sts_b:
            assert abs(result["splits"][split] - scores[split]) <= 1e-3, (pooling, k, split)
        assert abs(result["avg"] - avg) <= 1e-3 and abs(result["w-avg"] - weighted) <= 1e-3
    raw, whitened = results[0]["splits"]["test"], results[1]["splits"]["test"]
    assert np.sign(whitened - raw) == np.sign(original[whitening.rank][0]["test"] - original[0][0]["test"])
    print(
        "\n%s: test Spearman ours / original: " % pooling
        + ", ".join(
            "%s %.4f / %.4f" % (r["setting"], r["splits"]["test"], original[r["n_components"]][0]["test"])
            for r in results
        )
    )


def test_beta_0_gamma_0_k_256_is_kexue_9079_on_chinese_sts_b(ours):
    """9079's setting without centring, on vectors of the package's unwhitened encoder."""
    encoded = ours["first-last-avg"]
    (result,), _ = evaluate(encoded, fit_statistics(encoded), [Setting(256, 0.0, 0.0)])
    first, second, labels = encoded["test"]
    shift, kernel, _ = su_9079_kernel(np.concatenate([first, second]), 0.0, 0.0)
    first, second = (first - shift) @ kernel[:, :256], (second - shift) @ kernel[:, :256]
    cosines = (first * second).sum(axis=1) / np.linalg.norm(first, axis=1) / np.linalg.norm(second, axis=1)
    expected = spearman(labels, cosines)
    assert abs(result["splits"]["test"] - expected) <= 1e-3
    print(
        "\nbeta 0, gamma 0, k 256: test Spearman ours %.4f, 9079 in numpy %.4f" % (result["splits"]["test"], expected)
    )


def test_convert_hf_of_the_built_in_model_gives_its_vectors(ours, sts_b, tmp_path):
    """``convert-hf minilm OUT`` writes the built-in model as a Google checkpoint: the same
    vectors through it (read by bert4keras' loader, not safetensors)."""
    from bert_whitening.checkpoints.convert import convert_hf
    from bert_whitening.encoding import encode

    convert_hf("minilm", str(tmp_path / "google"))
    assert find_model(str(tmp_path / "google")).format == "google"
    first = [pair[0] for pair in sts_b["test"][:64]]
    converted = encode(build_encoders(str(tmp_path / "google"), poolings=["cls"])["cls"], first)
    np.testing.assert_allclose(converted, ours["cls"]["test"][0][:64], rtol=0, atol=1e-5)
