"""The original chn/eval.py command line, over the package.

    python eval/eval.py MODEL_TYPE POOLING TASK N_COMPONENTS [--model-root DIR] [--data-dir DIR]
                        [--method whitening|flow] [--seed S]

MODEL_TYPE is one of the original's, or ``minilm``: the built-in all-MiniLM-L6-v2, installed
as a package, so that the script runs with no checkpoint at hand (no --model-root; an English
model, whose figures on the Chinese tasks are low).

Same choices, meanings and printed lines as the original: maxlen 64 (128 for PAWSX); the
whitening fitted on both sentences of every pair of all splits of the task; then one line per
split ``TASK-split: spearman``, and ``avg`` and ``w-avg`` (weighted by split size). The
checkpoint of MODEL_TYPE is found under --model-root (else $BERT_WHITENING_MODELS) by the
original directory names. Differences, on purpose: splits that are missing are skipped (and
named) instead of failing; and where the covariance is singular (eigenvalues at round-off
level, as with cls or last-avg pooling, whose vectors come out of one LayerNorm), a negative
N_COMPONENTS keeps the rank-many real directions, with a warning. The original divides by the
square root of those round-off eigenvalues and so adds dimensions of amplified noise, whose
values change with batch composition: its figures there cannot be reproduced by anyone.
``--method flow`` (not in the original) prints the same lines for a BERT-flow trained with
``--seed`` on the same vectors instead of the whitening (`bert_whitening.flow`); N_COMPONENTS is
then not used.
"""

import argparse
import gc
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_whitening.checkpoints import BUILTIN_MODEL  # noqa: E402
from bert_whitening.data import TASKS, ReadOptions  # noqa: E402
from bert_whitening.errors import BertWhiteningError  # noqa: E402
from bert_whitening.evaluation import EvalOptions, evaluate_tasks  # noqa: E402
from bert_whitening.names import POOLINGS  # noqa: E402

MODEL_DIRS = {
    "BERT": ("chinese_L-12_H-768_A-12", "bert"),
    "RoBERTa": ("chinese_roberta_wwm_ext_L-12_H-768_A-12", "roberta"),
    "WoBERT": ("chinese_wobert_plus_L-12_H-768_A-12", "wobert"),
    "NEZHA": ("nezha_base_wwm", "nezha"),
    "RoFormer": ("chinese_roformer_L-12_H-768_A-12", "roformer"),
    "BERT-large": ("uer/mixed_corpus_bert_large_model", "bert"),
    "RoBERTa-large": ("chinese_roberta_wwm_large_ext_L-24_H-1024_A-16", "roberta"),
    "NEZHA-large": ("nezha_large_wwm", "nezha"),
    "SimBERT": ("chinese_simbert_L-12_H-768_A-12", "simbert"),
    "SimBERT-tiny": ("chinese_simbert_L-4_H-312_A-12", "simbert"),
    "SimBERT-small": ("chinese_simbert_L-6_H-384_A-12", "simbert"),
}
MODELS_ENV = "BERT_WHITENING_MODELS"


def model_spec(parser, args):
    """The encoder MODEL_TYPE names: the built-in model, or the checkpoint under --model-root
    (else $BERT_WHITENING_MODELS) by the original's directory name."""
    from bert_whitening.config import EncoderConfig

    if args.model_type == BUILTIN_MODEL:
        return EncoderConfig(BUILTIN_MODEL, "bert", args.pooling, maxlen=None)
    root = args.model_root or os.environ.get(MODELS_ENV)
    if not root:
        parser.error(
            "give --model-root DIR or set %s (or MODEL_TYPE %s, the built-in model)" % (MODELS_ENV, BUILTIN_MODEL)
        )
    name, family = MODEL_DIRS[args.model_type]
    return EncoderConfig(os.path.join(root, name), family, args.pooling, maxlen=None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_type", choices=list(MODEL_DIRS) + [BUILTIN_MODEL])
    parser.add_argument("pooling", choices=POOLINGS)
    parser.add_argument("task_name", choices=TASKS)
    parser.add_argument("n_components", type=int, help="0 = no whitening, negative = all, k")
    parser.add_argument(
        "--model-root", help="directory holding the checkpoints under their original names (default: $%s)" % MODELS_ENV
    )
    parser.add_argument(
        "--data-dir", help="senteval_cn directory (default: $BERT_WHITENING_DATA, else data/senteval_cn)"
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--method", choices=["whitening", "flow"], default="whitening")
    parser.add_argument("--seed", type=int, default=0, help="the flow's seed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    spec = model_spec(parser, args)
    try:
        flow = args.method == "flow"
        options = EvalOptions(
            directory=args.data_dir,
            n_components=[] if flow else [args.n_components],
            read=ReadOptions(batch_size=args.batch_size),
            methods=[args.method],
            flow_seeds=[args.seed],
        )
        report, _ = evaluate_tasks(spec, [args.task_name], options)
    except BertWhiteningError as error:
        print("error: %s" % error, file=sys.stderr)
        return 1
    task = report["tasks"][args.task_name]
    missing = [s for s in ("train", "valid", "test") if s not in task["counts"]]
    if missing:
        print("missing splits (skipped): %s" % ", ".join(missing), file=sys.stderr)
    (result,) = task["results"]
    for split, value in result["splits"].items():
        print("%s-%s: %s" % (args.task_name, split, value))
    print("avg: %s" % result["avg"])
    print("w-avg: %s" % result["w-avg"])
    return 0


if __name__ == "__main__":
    status = main()
    gc.freeze()  # skip the last collection at exit, as bert_whitening.cli.console_main does
    sys.exit(status)
