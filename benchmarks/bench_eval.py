"""`bert-whitening eval`'s pipeline against the original global-padding procedure, same run.

    python benchmarks/bench_eval.py [--task STS-B] [--pooling first-last-avg]

Both evaluate the Chinese STS-B task of ../shared/data (all splits, about 16,000 sentences)
with all-MiniLM-L6-v2, the whitening fitted on all splits, n_components = all:
- ours: each distinct sentence once, sorted by length, batches of 64 padded to their own
  longest, one tf.function;
- original (chn/utils.py, re-implemented in tests/reference.py): every split padded to its
  longest sentence, run through the Keras model 32 rows at a time (Keras predict's default
  batch; predict_on_batch is timed instead of predict, whose tf.data autotune can stall).
Prints seconds, sentences/s, the speed-up, and both Spearman figures (they must agree).
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
SHARED = os.path.join(ROOT, "..", "shared", "data", "senteval_cn")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="STS-B")
    parser.add_argument("--pooling", default="first-last-avg")
    args = parser.parse_args()

    from bert_whitening.backend import Tokenizer, build_transformer_model
    from bert_whitening.checkpoints import find_model
    from bert_whitening.data import distinct_sentences, load_task
    from bert_whitening.encoding import encode
    from bert_whitening.evaluation import Setting, encode_splits, evaluate, fit_statistics
    from bert_whitening.models import build_encoder

    from reference import original_eval

    splits = load_task(args.task, SHARED)
    sentences = 2 * sum(len(pairs) for pairs in splits.values())
    files = find_model("minilm")
    bert = build_transformer_model(
        None, dict(files.variables), with_pool="linear" if args.pooling == "pooler" else False, **files.config
    )
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    encoder = build_encoder("minilm", pooling=args.pooling)
    warm = list(splits.values())[0][:64]
    encode(encoder, [a for a, _, _ in warm])
    original_eval(bert, tokenizer, {"warm": warm}, args.pooling, [0], chunk=32, global_padding=True)

    start = time.perf_counter()
    encoded = encode_splits(lambda s: encode(encoder, s, 64, progress=False), splits)
    (ours,), whitening = evaluate(encoded, fit_statistics(encoded), [Setting(-1)])
    ours_seconds = time.perf_counter() - start

    start = time.perf_counter()
    original = original_eval(bert, tokenizer, splits, args.pooling, [whitening.rank], chunk=32, global_padding=True)
    original_seconds = time.perf_counter() - start

    print(
        "%s, %s pooling, all-MiniLM-L6-v2, %d sentences (%d distinct), n_components all (%d); %d cores"
        % (args.task, args.pooling, sentences, len(distinct_sentences(splits)), whitening.rank, os.cpu_count())
    )
    print("%-34s %9s %12s %10s" % ("procedure", "seconds", "sentences/s", "w-avg"))
    print(
        "%-34s %9.1f %12.0f %10.4f"
        % ("bert-whitening eval (length-sorted)", ours_seconds, sentences / ours_seconds, ours["w-avg"])
    )
    print(
        "%-34s %9.1f %12.0f %10.4f"
        % ("original (global padding)", original_seconds, sentences / original_seconds, original[whitening.rank][2])
    )
    print("speed-up: %.2fx" % (original_seconds / ours_seconds))


if __name__ == "__main__":
    main()
