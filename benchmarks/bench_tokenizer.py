"""Tokenising: the package's `Tokenizer` against bert4keras' own, on English and Chinese sentences.

    python benchmarks/bench_tokenizer.py [--sentences 4000] [--rounds 5]

The first ``--sentences`` distinct sentences of the English STS benchmark and of the senteval_cn
STS-B task (../shared/data), each tokenised by both with all-MiniLM-L6-v2's vocabulary
(lower-casing, as the model does), in alternating rounds, a fresh tokenizer each round (what a
command starts with). Prints the best round of each and their ratio, and checks that both gave
the same ids for every sentence.
"""

import argparse
import os
import platform
import time

from bench_encode import SENTEVAL, cpu_name  # bench_encode puts the checkout on sys.path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from bert_whitening.backend import Tokenizer as Bert4kerasTokenizer
    from bert_whitening.checkpoints import find_model
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task
    from bert_whitening.tokenization.tokenizer import Tokenizer

    vocab = find_model("minilm").vocab_path
    texts = {
        "English STS benchmark": load_task(ENGLISH_STS, SENTEVAL),
        "Chinese STS-B": load_task("STS-B", SENTEVAL),
    }
    kinds = {"bert4keras": Bert4kerasTokenizer, "bert-whitening": Tokenizer}
    print("machine: %s, %d cores, %s" % (platform.machine(), os.cpu_count(), cpu_name()))
    print("%-30s %12s %16s %8s  same ids" % ("sentences", "bert4keras s", "bert-whitening s", "ratio"))
    for name, splits in texts.items():
        sentences = distinct_sentences(splits)[: args.sentences]
        best, ids = {}, {}
        for _ in range(args.rounds):
            for kind, make in kinds.items():
                tokenizer = make(vocab, do_lower_case=True)
                start = time.perf_counter()
                ids[kind] = [tokenizer.encode(sentence) for sentence in sentences]
                best[kind] = min(best.get(kind, float("inf")), time.perf_counter() - start)
        same = ids["bert4keras"] == ids["bert-whitening"]
        print(
            "%-30s %12.3f %16.3f %7.1fx  %s"
            % (
                "%s (%d)" % (name, len(sentences)),
                best["bert4keras"],
                best["bert-whitening"],
                best["bert4keras"] / best["bert-whitening"],
                "yes" if same else "NO",
            )
        )


if __name__ == "__main__":
    main()
