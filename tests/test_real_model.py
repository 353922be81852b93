"""The package on the real all-MiniLM-L6-v2 against a plain re-implementation of the original
procedure (tests/reference.py), on the Chinese STS-B test split of ../shared/data, the
whitening fitted on it (all three splits would add minutes to CI and test nothing more)."""
import os

import numpy as np
import pytest

from bert_whitening.backend import Tokenizer, build_transformer_model
from bert_whitening.checkpoints import find_model
from bert_whitening.data import load_task
from bert_whitening.encoding import encode
from bert_whitening.evaluation import Setting, encode_splits, evaluate, fit_statistics
from bert_whitening.models import build_encoder
from bert_whitening.names import POOLINGS

from reference import original_eval

pytestmark = pytest.mark.slow

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="module")
def sts_b():
    directory = os.path.join(SHARED, "senteval_cn")
    if not os.path.isdir(directory):
        if os.environ.get("CI"):
            pytest.fail("../shared/data must lie beside the checkout in CI")
        pytest.skip("../shared/data is not beside this checkout")
    splits = load_task("STS-B", directory)
    return {"test": splits["test"]}


@pytest.mark.parametrize("pooling", POOLINGS)
def test_eval_equals_the_original_procedure_on_chinese_sts_b(sts_b, pooling):
    files = find_model("minilm")
    bert = build_transformer_model(None, files.weights, with_pool="linear" if pooling == "pooler"
                                   else False, **files.config)
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    encoder = build_encoder("minilm", pooling=pooling)
    encoded = encode_splits(lambda sentences: encode(encoder, sentences), sts_b)
    results, whitening = evaluate(encoded, fit_statistics(encoded), [Setting(k) for k in (0, -1, 256)])
    # first-last-avg mixes two LayerNorm outputs; the others have null directions (see
    # tests/test_evaluation.py), where "all" keeps the real ones.
    assert (whitening.rank == 384) == (pooling == "first-last-avg"), whitening.rank
    original = original_eval(bert, tokenizer, sts_b, pooling, [0, whitening.rank, 256])
    for result in results:
        k = result["n_components"]
        scores, avg, weighted = original[k]
        for split in sts_b:
            assert abs(result["splits"][split] - scores[split]) <= 1e-3, (pooling, k, split)
        assert abs(result["avg"] - avg) <= 1e-3 and abs(result["w-avg"] - weighted) <= 1e-3
    raw, whitened = results[0]["splits"]["test"], results[1]["splits"]["test"]
    assert np.sign(whitened - raw) == np.sign(original[whitening.rank][0]["test"] - original[0][0]["test"])
    print("\n%s: test Spearman ours / original: " % pooling + ", ".join(
        "%s %.4f / %.4f" % (r["setting"], r["splits"]["test"], original[r["n_components"]][0]["test"])
        for r in results))
