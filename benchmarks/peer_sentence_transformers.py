"""The sentence-transformers side of bench_encode.py; runs in .venv-torch (scripts/torch_venv.py).

    python peer_sentence_transformers.py REQUEST.json RESPONSE.npz

REQUEST holds the sentences, the model directory, maxlen, batch size, threads and repetitions.
RESPONSE gets the seconds of each timed repetition and the vectors of the last one.
"""
import json
import sys
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, __version__


def main(request_path, response_path):
    with open(request_path, encoding="utf-8") as stream:
        request = json.load(stream)
    torch.set_num_threads(request["threads"])
    model = SentenceTransformer(request["model"], device="cpu")
    model.max_seq_length = request["maxlen"]
    sentences = request["sentences"]
    model.encode(sentences[:request["batch_size"]], batch_size=request["batch_size"])  # warm-up
    seconds = []
    for _ in range(request["repeats"]):
        start = time.perf_counter()
        vectors = model.encode(sentences, batch_size=request["batch_size"])
        seconds.append(time.perf_counter() - start)
    np.savez(response_path, seconds=np.array(seconds), vectors=vectors,
             versions=np.array(["sentence-transformers %s" % __version__, "torch %s" % torch.__version__]),
             threads=torch.get_num_threads())


if __name__ == "__main__":
    main(*sys.argv[1:3])
