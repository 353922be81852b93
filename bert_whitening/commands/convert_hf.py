"""``convert-hf``: a Hugging Face BERT written as a Google-format model directory."""

import logging

from bert_whitening.commands.base import Command, Paths
from bert_whitening.io.atomic import DIRECTORY

logger = logging.getLogger("bert_whitening")


def add_arguments(parser):
    parser.add_argument(
        "hf_dir", metavar="HF_DIR", help="Hugging Face BERT directory, or minilm (the built-in all-MiniLM-L6-v2)"
    )
    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (new, unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")


def run_convert_hf(args):
    from bert_whitening.checkpoints.convert import convert_hf

    convert_hf(args.hf_dir, args.out_dir, overwrite=args.overwrite)
    logger.info("wrote %s (bert_config.json, bert_model.ckpt.*, vocab.txt)", args.out_dir)


COMMAND = Command(
    name="convert-hf",
    help="write a Hugging Face BERT as a Google-format checkpoint",
    description="Read config.json, model.safetensors and vocab.txt with every check --model makes (no "
    "PyTorch needed) and write bert_config.json, bert_model.ckpt.* with google-research/bert variable "
    "names, and vocab.txt, which bert4keras and the original scripts load. Other "
    "commands read Hugging Face directories directly; this is for tools that "
    "do not.",
    add_arguments=add_arguments,
    run=run_convert_hf,
    paths=Paths({"out_dir": DIRECTORY}, ("hf_dir",)),
    weights_read_only=False,
)
