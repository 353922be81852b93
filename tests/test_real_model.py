"""The package on the real all-MiniLM-L6-v2 against a plain re-implementation of the original
procedure (tests/reference.py), on the Chinese STS-B test split of ../shared/data."""
import os

import numpy as np
import pytest

from bert_whitening.backend import Tokenizer, build_transformer_model
from bert_whitening.checkpoints import find_model
from bert_whitening.data import read_pairs
from bert_whitening.encoding import encode
from bert_whitening.models import build_encoder
from bert_whitening.whitening import WhiteningStats, fit_whitening
from reference import original_encode, original_kernel_bias, original_transform_and_normalize, spearman

pytestmark = pytest.mark.slow

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="module")
def sts_b_test():
    path = os.path.join(SHARED, "senteval_cn", "STS-B", "STS-B.test.data")
    if not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail("../shared/data must lie beside the checkout in CI")
        pytest.skip("../shared/data is not beside this checkout")
    return list(read_pairs(path))


def test_whitening_on_chinese_sts_b_moves_spearman_as_the_original_does(sts_b_test):
    first, second = [a for a, _, _ in sts_b_test], [b for _, b, _ in sts_b_test]
    labels = np.array([label for _, _, label in sts_b_test])

    files = find_model("minilm")
    bert = build_transformer_model(None, files.weights, **files.config)
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    ref_a, ref_b = (original_encode(bert, tokenizer, s) for s in (first, second))
    kernel, bias = original_kernel_bias([ref_a, ref_b])

    encoder = build_encoder("minilm", pooling="first-last-avg")
    ours_a, ours_b = (encode(encoder, s).astype(np.float64) for s in (first, second))
    np.testing.assert_allclose(ours_a, ref_a, atol=1e-5)
    whitening = fit_whitening(WhiteningStats().update(ours_a).update(ours_b))

    figures = {}
    for k in (0, -1, 256):
        cols = slice(None) if k < 0 else slice(0, k)
        reference = spearman(labels, (original_transform_and_normalize(ref_a, kernel[:, cols] if k else None, bias)
                                      * original_transform_and_normalize(ref_b, kernel[:, cols] if k else None, bias)).sum(1))
        ours = spearman(labels, (whitening.transform(ours_a, k) * whitening.transform(ours_b, k)).sum(1))
        figures[k] = (ours, reference)
        assert abs(ours - reference) <= 1e-3, (k, ours, reference)
    raw, whitened = figures[0][0], figures[-1][0]
    assert np.sign(whitened - raw) == np.sign(figures[-1][1] - figures[0][1]) != 0
    print("Chinese STS-B test, all-MiniLM-L6-v2 first-last-avg, Spearman ours / original: "
          + ", ".join("k=%s %.4f / %.4f" % (k, *v) for k, v in figures.items()))
