"""The main job of the README, offline: fit a whitening on the sample pairs and encode with it.

Without --model it writes a small *random* BERT first (no pretrained model can be downloaded
here), so the figures show the pipeline working end to end, not the quality of a real model.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample")


def random_demo_model(directory):
    """A 2-layer random BERT whose vocabulary covers every character of the sample data."""
    from bert_whitening.checkpoints import random_weights, write_checkpoint

    chars = set()
    for name in ("pairs.data", "sentences.txt"):
        with open(os.path.join(SAMPLE, name), encoding="utf-8") as stream:
            chars.update(stream.read().replace("\t", "").replace("\n", ""))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(chars - set("0123456789"))
    config = {"vocab_size": len(vocab), "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "hidden_act": "gelu",
              "max_position_embeddings": 128, "type_vocab_size": 2, "hidden_dropout_prob": 0.1,
              "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02}
    write_checkpoint(directory, config, random_weights(config, seed=0, scale=0.1), vocab)
    return directory


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="Google-format checkpoint directory (default: a random "
                                        "demo model written under --out)")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "demo"),
                        help="where the model, whitening and vectors are written")
    args = parser.parse_args()
    from bert_whitening.cli import main as cli

    os.makedirs(args.out, exist_ok=True)
    model = args.model or random_demo_model(os.path.join(args.out, "random-bert"))
    if not args.model:
        print("demo model: a random 2-layer BERT at %s (no pretrained model is downloaded)" % model)
    whitening = os.path.join(args.out, "whitening.npz")
    vectors = os.path.join(args.out, "vectors.npy")
    steps = [
        ["fit", "--model", model, "--output", whitening, os.path.join(SAMPLE, "pairs.data")],
        ["encode", "--model", model, "--whitening", whitening, "--output", vectors,
         os.path.join(SAMPLE, "sentences.txt")],
    ]
    for step in steps:
        print("$ bert-whitening " + " ".join(step))
        if cli(step) != 0:
            return 1

    with open(os.path.join(SAMPLE, "sentences.txt"), encoding="utf-8") as stream:
        sentences = stream.read().splitlines()
    matrix = np.load(vectors)
    similarity = matrix @ matrix.T
    np.fill_diagonal(similarity, -np.inf)
    print("\n%d vectors of dimension %d; nearest neighbour by cosine:" % matrix.shape)
    for row in range(0, len(sentences), 4):
        best = int(np.argmax(similarity[row]))
        print("  %s  ->  %s  (%.3f)" % (sentences[row], sentences[best], similarity[row, best]))
    print("\nwrote %s and %s" % (whitening, vectors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
