"""A dimension chosen at serving time against ``encode`` at that k, on the built-in model.

    python benchmarks/bench_dimensions.py [--k 256] [--dimensions 1 32 64 128 256] [--workdir DIR]

Fits a whitening of the built-in all-MiniLM-L6-v2 (first-last-avg, maxlen 64) on every split of
Chinese STS-B and exports it at ``--k`` (float32), both with the command line. Then, for each d of
``--dimensions``, on the distinct sentences of STS-B's test split:

- ``encode --precision float32 --n-components d`` (what a user stores; float32 because the export
  is, where ``auto`` may choose bfloat16 at some k) against the SavedModel's ``serve_dimensions``
  at d, loaded with TensorFlow alone, in batches of 64 in file order;
- ``serve_dimensions`` at d against the same SavedModel's ``serving_default`` vectors cut to d and
  renormalised: what the cut adds.

It also prints ``serving_default`` against ``encode`` at k: the float round-off by which the
served graph and the command line's differ whatever the cut, which bounds the first comparison.
"""

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]
STSB = os.path.join(ROOT, "..", "shared", "data", "senteval_cn", "STS-B")
CLI = [sys.executable, "-m", "bert_whitening"]
BATCH = 64


def cli(*arguments):
    """Run one command of the command line, its log kept from the output unless it fails."""
    done = subprocess.run(CLI + list(arguments), capture_output=True, text=True)
    if done.returncode:
        sys.exit("%s failed:\n%s" % (" ".join(arguments[:1]), done.stderr[-2000:]))


def distinct_test_sentences(path):
    """The distinct sentences of STS-B's test split, in file order, written one a line to ``path``."""
    from bert_whitening.data import distinct_sentences, load_task

    sentences = distinct_sentences({"test": load_task("STS-B", os.path.dirname(STSB))["test"]})
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("".join(s + "\n" for s in sentences))
    return sentences


def served(export, sentences, dimensions):
    """``{d: serve_dimensions' vectors at d}`` and ``serving_default``'s, in batches of `BATCH`."""
    import numpy as np

    from bert_whitening import SentenceEncoder
    from bert_whitening.backend import tf
    from bert_whitening.encoding import tokenize
    from bert_whitening.tokenization.token_ids import pad_ids

    sequences, _ = tokenize(SentenceEncoder("minilm", maxlen=64).keras_encoder, sentences)
    model = tf.saved_model.load(export)
    batches = [pad_ids(sequences[at : at + BATCH]) for at in range(0, len(sequences), BATCH)]

    def run(name, **extra):
        signature = model.signatures[name]
        ids = [tf.constant(batch, tf.int32) for batch in batches]
        rows = [signature(input_ids=one, segment_ids=tf.zeros_like(one), **extra)["embedding"] for one in ids]
        return np.concatenate([row.numpy() for row in rows])

    at_k = run("serving_default")
    return {d: run("serve_dimensions", dimensions=tf.constant(d, tf.int32)) for d in dimensions}, at_k


def main():
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=256, help="the whitened dimensions exported")
    parser.add_argument("--dimensions", type=int, nargs="+", default=[1, 32, 64, 128, 256])
    parser.add_argument(
        "--workdir",
        help="a new directory to keep the whitening, the export and the vectors in (default: a temporary one)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dimensions-") as temporary:
        work = args.workdir or temporary
        os.makedirs(work, exist_ok=True)
        whitening, export, text = (os.path.join(work, name) for name in ("whitening.npz", "served", "sentences.txt"))
        sentences = distinct_test_sentences(text)
        splits = [os.path.join(STSB, "STS-B.%s.data" % split) for split in ("train", "valid", "test")]
        cli("fit", "--pooling", "first-last-avg", "--output", whitening, *splits)
        cli(
            "export",
            "--whitening",
            whitening,
            "--n-components",
            str(args.k),
            "--output",
            export,
            "--overwrite",
            "--version",
            "1",
        )
        encoded = {}
        for d in sorted(set(args.dimensions) | {args.k}):
            output = os.path.join(work, "encoded-%d.npy" % d)
            cli(
                "encode",
                "--precision",
                "float32",
                "--whitening",
                whitening,
                "--n-components",
                str(d),
                "--output",
                output,
                text,
            )
            encoded[d] = np.load(output)
        at_d, at_k = served(os.path.join(export, "1"), sentences, args.dimensions)
    print(
        "%d sentences (STS-B test), export at k = %d, float32; largest absolute differences" % (len(sentences), args.k)
    )
    print("%6s %24s %28s" % ("d", "serve_dimensions - encode", "serve_dimensions - cut at k"))
    for d in args.dimensions:
        cut = at_k[:, :d].astype(np.float64)
        cut /= np.linalg.norm(cut, axis=1, keepdims=True)
        print("%6d %24.3g %28.3g" % (d, np.abs(at_d[d] - encoded[d]).max(), np.abs(at_d[d] - cut).max()))
    print("serving_default - encode at k = %d: %.3g" % (args.k, np.abs(at_k - encoded[args.k]).max()))


if __name__ == "__main__":
    main()
