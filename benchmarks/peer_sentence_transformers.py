"""The sentence-transformers side of bench_encode.py; runs in .venv-torch (scripts/torch_venv.py).

    python peer_sentence_transformers.py REQUEST.json

REQUEST holds the sentences, the model directory, maxlen, batch size and threads. After loading
and a warm-up it prints a JSON line with its versions and thread count, then answers each
``time`` line on stdin with the seconds of one full encode, so that the benchmark can interleave
its repetitions with ours; ``save PATH`` writes the last vectors to PATH (.npy) and exits.
"""
import json
import sys
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, __version__


def main(request_path):
    with open(request_path, encoding="utf-8") as stream:
        request = json.load(stream)
    torch.set_num_threads(request["threads"])
    model = SentenceTransformer(request["model"], device="cpu")
    model.max_seq_length = request["maxlen"]
    sentences, batch_size = request["sentences"], request["batch_size"]
    vectors = model.encode(sentences[:batch_size], batch_size=batch_size)  # warm-up
    print(json.dumps({"versions": "sentence-transformers %s, torch %s" % (__version__, torch.__version__),
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "time":
            start = time.perf_counter()
            vectors = model.encode(sentences, batch_size=batch_size)
            print(time.perf_counter() - start, flush=True)
        elif command == "save":
            np.save(argument, vectors)
            return


if __name__ == "__main__":
    main(sys.argv[1])
