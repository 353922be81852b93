"""The main job of the README, offline, on the built-in all-MiniLM-L6-v2 and the sample pairs.

1. encode both sentences of every pair in data/sample-en/pairs.data (English, the built-in
   model's language; --pairs data/sample/pairs.data is the Chinese sample, for a Chinese --model);
2. fit a whitening on them and compare the Spearman correlation of cosine with the gold scores,
   raw and whitened, for several n_components;
3. export the whitened encoder (k = --n-components) as a SavedModel with both signatures;
4. reload the export in a fresh process, embed a few pairs through serve_text and print their
   raw and whitened cosines.
The sample is small (400 sentences for 384 dimensions), so the whitening keeps only the
leading directions by default: the trailing ones are estimated from too few vectors.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import scipy.stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
PAIRS = os.path.join(ROOT, "data", "sample-en", "pairs.data")


def spearman(a, b, labels):
    return scipy.stats.spearmanr(labels, (a * b).sum(axis=1)).correlation


def shown_rows(labels, count=6):
    """The pairs the table shows: the first of each gold score, highest score first."""
    first = {}
    for row, label in enumerate(labels):
        first.setdefault(label, row)
    return [first[label] for label in sorted(first, reverse=True)][:count]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm", help="model directory (default: built-in)")
    parser.add_argument("--pairs", default=PAIRS, help="senteval_cn pair file (default: the English sample)")
    parser.add_argument("--pooling", default="first-last-avg")
    parser.add_argument("--n-components", type=int, default=64, help="whitened dimensions kept in the export")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "demo"))
    args = parser.parse_args()
    started = time.time()

    from bert_whitening.data import read_pairs
    from bert_whitening.encoding import encode
    from bert_whitening.evaluation import encode_splits
    from bert_whitening.export import ExportOptions, export_saved_model, run_in_fresh_process
    from bert_whitening.models import build_encoder, with_whitening
    from bert_whitening.vectors import l2_normalize
    from bert_whitening.whitening import WhiteningStats, fit_whitening

    pairs = list(read_pairs(args.pairs))
    labels = np.array([label for _, _, label in pairs])
    encoder = build_encoder(args.model, pooling=args.pooling)
    print(
        "model: %s (%s format), %s pooling; data: %s, %d pairs"
        % (
            encoder.model_identity["name"],
            encoder.model_identity["format"],
            args.pooling,
            os.path.relpath(args.pairs, ROOT),
            len(pairs),
        )
    )
    sentences = [s for a, b, _ in pairs for s in (a, b)]
    ids = [i for s in sentences for i in encoder.tokenizer.encode(s)[0][1:-1]]
    unknown = np.mean(np.array(ids) == encoder.tokenizer.token_to_id("[UNK]"))
    print(
        "%.1f%% of the sample's tokens are [UNK] for this vocabulary (a model reads only its own language)"
        % (100 * unknown)
    )
    # encoded as `eval` encodes a task (each distinct sentence once, in one call), so that both
    # print the same Spearman for one setting
    first, second, _ = encode_splits(lambda texts: encode(encoder, texts), {"sample": pairs})["sample"]
    whitening = fit_whitening(
        WhiteningStats().update(first).update(second),
        n_components=args.n_components,
        pooling=args.pooling,
        model_identity=encoder.model_identity,
    )
    os.makedirs(args.out, exist_ok=True)
    whitening.save(os.path.join(args.out, "whitening.npz"))

    print("\nSpearman of cosine with the gold scores (whitening fitted on the same %d sentences):" % whitening.count)
    for k in (0, -1, 256, 128, 64, 32):
        label = "raw (no whitening)" if k == 0 else "whitened, k = %s" % ("all" if k < 0 else k)
        a, b = whitening.transform(first, k), whitening.transform(second, k)
        print("  %-22s %.4f" % (label, spearman(a, b, labels)))

    whitened = with_whitening(encoder, whitening, args.n_components)
    path, difference = export_saved_model(
        whitened, os.path.join(args.out, "served"), ExportOptions(version=1, text=True, overwrite=True)
    )
    print(
        "\nexported %s (serving_default + serve_text); reloaded in a fresh process it differs "
        "from the Keras model by at most %.1e" % (os.path.relpath(path, ROOT), difference)
    )

    shown = shown_rows(labels)
    rows = [pairs[i] for i in shown]
    with tempfile.TemporaryDirectory() as scratch:  # serve_text, loaded as a server loads it
        empty = np.array([whitened.tokenizer.encode("")[0]], np.int32)  # [CLS] [SEP]: a row serving_default takes
        served = run_in_fresh_process(path, empty, [s for a, b, _ in rows for s in (a, b)], scratch)["serve_text"]
    raw_a, raw_b = l2_normalize(first[shown]), l2_normalize(second[shown])
    print(
        "\n%-5s %-8s %-9s  %s"
        % ("gold", "raw cos", "whitened", "pair (whitened cosine from the reloaded SavedModel's serve_text)")
    )
    for row, (a, b, label) in enumerate(rows):
        print(
            "%-5g %-8.3f %-9.3f  %s | %s"
            % (label, raw_a[row] @ raw_b[row], served[2 * row] @ served[2 * row + 1], a, b)
        )
    print("\ndone in %.0f s; outputs in %s" % (time.time() - started, os.path.relpath(args.out, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
