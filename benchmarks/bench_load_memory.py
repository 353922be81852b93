"""Memory a model takes to load: our encoder against transformers', on one BERT of random weights.

    python benchmarks/bench_load_memory.py [--size base] [--workdir out/bench_load_memory]

Writes a Hugging Face BERT directory of random float32 weights (as tests/checkpoints/test_huggingface.py
does) (``--size base``: Chinese
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
sys.path.insert(0, os.path.join(ROOT, "tests"))

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


def write_hf(directory, sizes):
    """A Hugging Face BERT directory of random float32 weights of ``sizes`` (tests/checkpoints/test_huggingface.py's);
    the bytes of its float32 weights."""
    from safetensors.numpy import save_file
    from test_hf import hf_tensors

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
    tensors = hf_tensors(config)
    os.makedirs(directory)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with open(os.path.join(directory, "config.json"), "w") as stream:
        json.dump(config, stream)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens = special + ["t%d" % i for i in range(sizes["vocab_size"] - len(special))]
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as stream:
        stream.writelines(token + "\n" for token in tokens)
    return sum(value.nbytes for value in tensors.values() if value.dtype == np.float32)


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
    model_bytes = write_hf(hf, SIZES[args.size])
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
