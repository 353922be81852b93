"""Memory a model takes to load: our encoder against transformers', on one BERT of random weights.

    python benchmarks/bench_load_memory.py [--size base] [--workdir out/bench_load_memory]

Writes a Hugging Face BERT directory of random float32 weights (``--size base``: Chinese
BERT-base's sizes, 21,128 tokens, 12 blocks of 768; ``small``: 4 blocks of 256), converts it to a
Google-format directory with ``convert-hf``, then loads each in a process of its own and encodes
one sentence:

- ``ours, huggingface`` / ``ours, google``: `SentenceEncoder.load` on either directory;
- ``ours, convert-hf``: the conversion itself (the built model, then every tensor written);
- ``transformers``: ``AutoModel.from_pretrained`` on the Hugging Face directory and one forward
  pass (sentence-transformers loads its BERT this way), in ``.venv-torch``.

Each process reports its anonymous memory (``RssAnon``, polled every 2 ms) and its resident set
(``VmHWM``, which also counts the file pages it maps) at their peak, less what they were once
the framework was imported. Memory does not depend on the machine's load, unlike time.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

SIZES = {
    "base": {"vocab_size": 21128, "hidden_size": 768, "num_hidden_layers": 12, "intermediate_size": 3072},
    "small": {"vocab_size": 21128, "hidden_size": 256, "num_hidden_layers": 4, "intermediate_size": 1024},
}

#: Run in each measured process: a thread that keeps the peak of RssAnon, and `report()`.
PROBE = """
import json, threading, time
def _status(key):
    with open("/proc/self/status") as stream:
        return next(int(line.split()[1]) * 1024 for line in stream if line.startswith(key + ":"))
_peak = [0]
def _poll():
    while True:
        _peak[0] = max(_peak[0], _status("RssAnon"))
        time.sleep(0.002)
threading.Thread(target=_poll, daemon=True).start()
def start():
    global _anon, _rss
    time.sleep(0.01)
    _anon, _rss = _status("RssAnon"), _status("VmRSS")
    _peak[0] = _anon
def report():
    time.sleep(0.01)
    print(json.dumps({"anon": max(_peak[0], _status("RssAnon")) - _anon, "rss": _status("VmHWM") - _rss}))
"""

OURS = """
from bert_whitening.backend import tf
start()
from bert_whitening import SentenceEncoder
SentenceEncoder.load({directory!r}, pooling="cls").encode(["今天天气很好"])
report()
"""

CONVERT = """
from bert_whitening.backend import tf
start()
from bert_whitening.checkpoints.convert import convert_hf
convert_hf({directory!r}, {output!r})
report()
"""

TRANSFORMERS = """
import torch, transformers
start()
model = transformers.AutoModel.from_pretrained({directory!r})
with torch.no_grad():
    model(input_ids=torch.tensor([[2, 10, 11, 3]]))
report()
"""


def write_hf(directory, sizes, rng):
    """A Hugging Face BERT directory of random float32 weights of ``sizes``; its float32 bytes."""
    from safetensors.numpy import save_file

    hidden, inner, vocab = sizes["hidden_size"], sizes["intermediate_size"], sizes["vocab_size"]

    def normal(*shape):
        return rng.normal(0.0, 0.02, shape).astype(np.float32)

    tensors = {
        "embeddings.word_embeddings.weight": normal(vocab, hidden),
        "embeddings.position_embeddings.weight": normal(512, hidden),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": np.zeros(hidden, np.float32),
    }
    linear = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "intermediate.dense": (inner, hidden),
        "output.dense": (hidden, inner),
    }
    for layer in range(sizes["num_hidden_layers"]):
        prefix = "encoder.layer.%d." % layer
        for name, shape in linear.items():
            tensors[prefix + name + ".weight"] = normal(*shape)
            tensors[prefix + name + ".bias"] = np.zeros(shape[0], np.float32)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[prefix + name + ".weight"] = np.ones(hidden, np.float32)
            tensors[prefix + name + ".bias"] = np.zeros(hidden, np.float32)
    os.makedirs(directory)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    config = dict(
        sizes,
        model_type="bert",
        architectures=["BertModel"],
        num_attention_heads=sizes["hidden_size"] // 64,
        hidden_act="gelu",
        max_position_embeddings=512,
        type_vocab_size=2,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        initializer_range=0.02,
        layer_norm_eps=1e-12,
    )
    with open(os.path.join(directory, "config.json"), "w") as stream:
        json.dump(config, stream)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as stream:
        stream.writelines(token + "\n" for token in special + ["t%d" % i for i in range(vocab - len(special))])
    return 4 * sum(value.size for value in tensors.values())


def measure(python, code, environment=None):
    """``{"anon", "rss"}`` bytes at their peak above the start, of ``code`` run by ``python``."""
    done = subprocess.run(
        [python, "-c", PROBE + code], capture_output=True, text=True, cwd=ROOT, env=environment, check=False
    )
    if done.returncode:
        raise SystemExit("a measured process failed:\n" + done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--workdir", default="out/bench_load_memory")
    args = parser.parse_args()
    import torch_venv

    shutil.rmtree(args.workdir, ignore_errors=True)
    hf, google = (
        os.path.abspath(os.path.join(args.workdir, "hf")),
        os.path.abspath(os.path.join(args.workdir, "google")),
    )
    model_bytes = write_hf(hf, SIZES[args.size], np.random.default_rng(0))
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    runs = [("ours, convert-hf", measure(sys.executable, CONVERT.format(directory=hf, output=google), environment))]
    runs += [
        ("ours, huggingface", measure(sys.executable, OURS.format(directory=hf), environment)),
        ("ours, google", measure(sys.executable, OURS.format(directory=google), environment)),
        ("transformers", measure(torch_venv.python(), TRANSFORMERS.format(directory=hf))),
    ]
    print(
        "CPU: %s; Python %s; %s model: %.0f MB of float32 weights"
        % (platform.processor() or platform.machine(), platform.python_version(), args.size, model_bytes / 1e6)
    )
    print("%-20s %14s %8s %14s %8s" % ("load", "anon MB", "x model", "resident MB", "x model"))
    for name, peak in runs:
        print(
            "%-20s %14.0f %8.2f %14.0f %8.2f"
            % (name, peak["anon"] / 1e6, peak["anon"] / model_bytes, peak["rss"] / 1e6, peak["rss"] / model_bytes)
        )


if __name__ == "__main__":
    main()
