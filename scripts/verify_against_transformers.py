"""Check the bert4keras path against Hugging Face transformers, layer by layer, on real sentences.

    python scripts/verify_against_transformers.py [--model DIR] [--sentences 200]

Runs in two environments so that PyTorch never becomes a dependency of the package:
1. here (the project's .venv): hidden states after every transformer block, through
   `find_model` + bert4keras' loader (the graph the commands' `FusedBert` is tested against
   within 1e-5, tests/integration/test_real_model.py), for real sentences from ../shared/data (Chinese
   STS-B and English STS-B);
2. in .venv-torch (see scripts/torch_venv.py: torch 2.13.0 CPU and transformers, created on
   first use): BertModel with output_hidden_states on the same token ids.
Prints the largest absolute difference per layer over real (non-padding) tokens; exits 1 if
any exceeds 1e-4.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch_venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data")
TOLERANCE = 1e-4

TRANSFORMERS_SIDE = r"""
import sys
import numpy as np
import torch
from transformers import BertModel

model_dir, request, response = sys.argv[1:4]
ids = np.load(request)["input_ids"]
model = BertModel.from_pretrained(model_dir).eval()
with torch.no_grad():
    out = model(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(ids != 0, dtype=torch.long),
                token_type_ids=torch.zeros(ids.shape, dtype=torch.long), output_hidden_states=True)
np.savez(response, *[h.numpy() for h in out.hidden_states[1:]])
"""


def real_sentences(count):
    """``count // 2`` Chinese STS-B sentences, then English STS benchmark ones."""
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task

    directory = os.path.join(SHARED, "senteval_cn")
    half = count // 2
    return (
        distinct_sentences(load_task("STS-B", directory))[:half]
        + distinct_sentences(load_task(ENGLISH_STS, directory))[: count - half]
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="minilm", help="Hugging Face BERT directory (default: the built-in all-MiniLM-L6-v2)"
    )
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--maxlen", type=int, default=64)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from bert_whitening.backend import Tokenizer, build_transformer_model, keras
    from bert_whitening.checkpoints import find_model
    from bert_whitening.encoding import token_ids
    from bert_whitening.serving import pad_ids

    files = find_model(args.model)
    if files.format != "huggingface":
        sys.exit("transformers reads Hugging Face directories; %s is %s format" % (files.directory, files.format))
    tokenizer = Tokenizer(files.vocab_path, do_lower_case=True)
    sentences = real_sentences(args.sentences)
    ids = pad_ids([token_ids(tokenizer, s, args.maxlen)[0] for s in sentences])
    bert = build_transformer_model(None, dict(files.variables), **files.config)
    layers = files.config["num_hidden_layers"]
    states = keras.Model(
        bert.inputs, [bert.get_layer("Transformer-%d-FeedForward-Norm" % i).output for i in range(layers)]
    )
    ours = states.predict_on_batch([ids, np.zeros_like(ids)])

    python = torch_venv.python()
    with tempfile.TemporaryDirectory() as scratch:
        request, response = os.path.join(scratch, "in.npz"), os.path.join(scratch, "out.npz")
        np.savez(request, input_ids=ids)
        subprocess.run([python, "-c", TRANSFORMERS_SIDE, files.directory, request, response], check=True)
        with np.load(response) as data:
            theirs = [data["arr_%d" % i] for i in range(layers)]
    real = ids != 0
    print(
        "model %s (%s), %d sentences (half Chinese STS-B, half English STS-B), %d real tokens"
        % (files.name, files.directory, len(sentences), real.sum())
    )
    worst = 0.0
    for layer, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        difference = float(np.abs(a[real] - b[real]).max())
        worst = max(worst, difference)
        print("layer %d: max |bert4keras - transformers| on real tokens = %.2e" % (layer, difference))
    print("largest difference %.2e (tolerance %.0e): %s" % (worst, TOLERANCE, "OK" if worst <= TOLERANCE else "FAILED"))
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
