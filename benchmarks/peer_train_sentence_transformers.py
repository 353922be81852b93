"""The peer's side of bench_train.py: sentence-transformers' training, in .venv-torch
(scripts/torch_venv.py).

    python peer_train_sentence_transformers.py REQUEST.json

REQUEST holds the model directory, the loss (``cosent`` or ``softmax``), the train pairs (first
sentences, second sentences, labels: the scores for CoSENT, the classes for the softmax, with
their count), the order of the pairs in each epoch and the softmax head's start (ours, so that
both sides start alike and see the same batches), the test sentences, batch size, maxlen,
learning rate, epochs, threads and the ``.npz`` to write.

The model is sentence-transformers' own: its ``Transformer`` module on the model directory (no
download) with maxlen as ``max_seq_length`` and mean pooling of the last layer (``Pooling``,
``"mean"``: our ``last-avg``), no ``Normalize`` (the softmax head sees the pooled vectors, as
ours does). It is trained by its ``CoSENTLoss`` (scale 20, ours) or ``SoftmaxLoss`` (on
``[u, v, |u - v|]``, ours) in a plain torch loop with ``torch.optim.Adam`` at a constant
learning rate, batches of pairs in the given order, each preprocessed by ``model.preprocess`` as
its data collator does: our recipe. Not its Trainer (``fit``), which needs accelerate (not in
.venv-torch) and whose defaults are another recipe (linear decay, warm-up steps, AdamW's weight
decay, gradient clipping at norm 1). Dropout is set to 0 in the model's configuration, as ours
trains without.

It writes the vectors of the test sentences (``vectors``) and prints one JSON line: versions,
threads, each epoch's mean train loss, the seconds of the training loop alone, and the
process's peak RSS.
"""

import json
import os
import resource
import sys
import time

import numpy as np
import torch
import transformers
from sentence_transformers import SentenceTransformer, __version__
from sentence_transformers.sentence_transformer.losses import CoSENTLoss, SoftmaxLoss
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def model_and_loss(request):
    transformer = Transformer(request["model"], max_seq_length=request["maxlen"], config_kwargs=NO_DROPOUT)
    dim = transformer.get_embedding_dimension()
    model = SentenceTransformer(modules=[transformer, Pooling(dim, "mean")], device="cpu")
    if request["loss"] == "cosent":
        return model, CoSENTLoss(model, scale=20.0), torch.float32
    loss = SoftmaxLoss(model, dim, request["num_labels"])
    with torch.no_grad():  # our head's start: a (3 * dim, num_labels) kernel is its weight transposed
        loss.classifier.weight.copy_(torch.tensor(request["head_kernel"]).T)
        loss.classifier.bias.copy_(torch.tensor(request["head_bias"]))
    return model, loss, torch.long


def train(request, model, loss, label_type):
    """The training loop; its seconds and each epoch's mean loss."""
    firsts, seconds, labels = request["firsts"], request["seconds"], request["labels"]
    optimizer = torch.optim.Adam(loss.parameters(), lr=request["learning_rate"])
    batch, epoch_losses = request["batch_size"], []
    model.train()
    started = time.perf_counter()
    for order in request["orders"]:
        total = 0.0
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            features = [model.preprocess([column[row] for row in rows]) for column in (firsts, seconds)]
            value = loss(features, torch.tensor([labels[row] for row in rows], dtype=label_type))
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            total += value.item()
        epoch_losses.append(total / -(-len(order) // batch))
    return time.perf_counter() - started, epoch_losses


def main(request_path):
    with open(request_path, encoding="utf-8") as stream:
        request = json.load(stream)
    torch.set_num_threads(request["threads"])
    model, loss, label_type = model_and_loss(request)
    seconds, epoch_losses = train(request, model, loss, label_type)
    model.eval()
    vectors = model.encode(request["test"], batch_size=64, convert_to_numpy=True)
    np.savez(request["output"], vectors=vectors.astype(np.float32))
    about = {
        "versions": "sentence-transformers %s, transformers %s, torch %s"
        % (__version__, transformers.__version__, torch.__version__),
        "threads": torch.get_num_threads(),
        "train_losses": epoch_losses,
        "seconds": seconds,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(json.dumps(about), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
