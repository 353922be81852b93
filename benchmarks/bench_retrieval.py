"""Search speed and memory against k: FAISS flat, FAISS HNSW, numpy brute force and serve_search.

    python benchmarks/bench_retrieval.py [--sizes 10000,100000,1000000] [--dims 384,256,128,64]
                                         [--hnsw-max 100000] [--workdir out/bench_retrieval]

Random unit vectors (speed does not depend on what they mean; quality is eval-retrieval's), one
run, every path on the same corpus and the same query batches:

- FAISS ``IndexFlatIP`` (exact) and ``IndexHNSWFlat`` (M 32, efConstruction 40, efSearch 64;
  built only up to --hnsw-max vectors, its build time grows fastest; Recall@10 against exact);
- numpy brute force: one matrix product and ``argpartition``/``argsort`` for the top 10;
- ``serve_search`` of a SavedModel written by `bert_whitening.export.ServingModule` with the
  corpus as a variable, loaded back as a server loads it. Its encoder is a stand-in (an embedding
  lookup of the query vectors by id), so the time measured is the search in the graph; the
  encoder's own latency is in bench_serving.py.

Reports queries/s in batches of 64 (FAISS on all its OpenMP threads), p50 latency of one query
(FAISS on one thread: see `bert_whitening.retrieval.faiss_indexes.one_thread`), and memory (bytes the index holds:
FAISS serialised size, the numpy array, the SavedModel's variables). Then the targets: at
k = 128 exact search >= 2.5x faster than at k = 384 and the index 3x smaller (largest size run),
and serve_search within 1.5x of FAISS flat on the same batches. Wall-clock on a shared machine:
read the ratios, taken within this one run.
"""

import argparse
import os
import platform
import shutil
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TOP_K = 10
BATCH = 64
QUERIES = 8 * BATCH


def timed(call, count, budget):
    """Seconds of each of up to ``count`` calls (at least 5, fewer once ``budget`` s are spent)."""
    call(0)  # warm-up
    times, started = [], time.perf_counter()
    for i in range(count):
        begun = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - begun)
        if i >= 4 and time.perf_counter() - started > budget:
            break
    return times


def measure(search, queries, budget, prepare=lambda rows: rows):
    """``(queries/s in batches of 64, p50 ms of one query)`` of ``search(prepare(query rows))``;
    ``prepare`` turns row ranges into what the path takes, outside the timing. Single queries
    run FAISS on one thread, as eval-retrieval does (`retrieval.faiss_indexes.one_thread`)."""
    from bert_whitening.retrieval.faiss_indexes import one_thread

    batches = [prepare(queries[i : i + BATCH]) for i in range(0, len(queries), BATCH)]
    singles = [prepare(queries[i : i + 1]) for i in range(100)]
    batch_times = timed(lambda i: search(batches[i % len(batches)]), len(batches), budget)
    with one_thread():
        single_times = timed(lambda i: search(singles[i]), len(singles), budget)
    return BATCH / np.median(batch_times), 1e3 * np.median(single_times)


def numpy_search(corpus):
    def search(queries):
        scores = queries @ corpus.T
        top = np.argpartition(-scores, TOP_K - 1, axis=1)[:, :TOP_K]
        order = np.argsort(-np.take_along_axis(scores, top, 1), axis=1)
        return np.take_along_axis(top, order, 1)

    return search


def saved_search(corpus, queries, directory):
    """A serve_search SavedModel over ``corpus`` whose stand-in encoder returns row
    ``input_ids[:, 0] - 1`` of ``queries`` (id 0 is padding, which the signature refuses);
    returns ``(serve_search, rows -> its inputs, variables bytes)``."""
    from bert_whitening.backend import keras, tf
    from bert_whitening.export import ServingModule

    input_ids = keras.Input((None,), dtype="int32", name="input_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    lookup = keras.layers.Embedding(len(queries) + 1, queries.shape[1], trainable=False)
    model = keras.Model([input_ids, segment_ids], lookup(input_ids[:, 0]))
    lookup.set_weights([np.vstack([np.zeros_like(queries[:1]), queries])])
    module = ServingModule(model, maxlen=1, vocab_size=len(queries) + 1, corpus=corpus, top_k=TOP_K)
    tf.saved_model.save(module, directory, signatures=module.signatures())
    del module
    serve = tf.saved_model.load(directory).signatures["serve_search"]
    size = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(os.path.join(directory, "variables"))
        for f in files
    )
    start = queries.__array_interface__["data"][0]
    first_row = lambda rows: (rows.__array_interface__["data"][0] - start) // queries.strides[0]

    def prepare(rows):
        ids = tf.constant(np.arange(first_row(rows) + 1, first_row(rows) + len(rows) + 1, dtype=np.int32)[:, None])
        return {"input_ids": ids, "segment_ids": tf.zeros_like(ids)}

    return lambda inputs: serve(**inputs)["ids"], prepare, size


def run_size(n, dim, rng, args, rows):
    from bert_whitening.retrieval import faiss_indexes as retrieval
    from bert_whitening.retrieval.benchmark import recall_against_exact, result_cosines

    corpus = rng.standard_normal((n, dim), dtype=np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    queries = rng.standard_normal((QUERIES, dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    flat = retrieval.flat_index(corpus)
    exact = flat.search(queries, TOP_K)[1]
    qps, p50 = measure(lambda q: flat.search(q, TOP_K), queries, args.budget)
    rows.append((n, dim, "faiss flat", qps, p50, retrieval.index_bytes(flat), ""))

    if n <= args.hnsw_max:
        started = time.perf_counter()
        hnsw = retrieval.hnsw_index(dim)
        hnsw.add(corpus)
        built = time.perf_counter() - started
        found = hnsw.search(queries, TOP_K)[1]
        recall = recall_against_exact(*(result_cosines(queries, corpus, ids) for ids in (found, exact)))
        qps, p50 = measure(lambda q: hnsw.search(q, TOP_K), queries, args.budget)
        rows.append(
            (
                n,
                dim,
                "faiss hnsw",
                qps,
                p50,
                retrieval.index_bytes(hnsw),
                "R@10 vs exact %.3f, built in %.0f s" % (recall, built),
            )
        )
        del hnsw

    search = numpy_search(corpus)
    assert (search(queries[:BATCH]) == exact[:BATCH]).mean() > 0.99
    qps, p50 = measure(search, queries, args.budget)
    rows.append((n, dim, "numpy brute force", qps, p50, corpus.nbytes, ""))

    directory = os.path.join(args.workdir, "search_%d_%d" % (n, dim))
    shutil.rmtree(directory, ignore_errors=True)
    try:
        served, prepare, size = saved_search(corpus, queries, directory)
        same = (served(prepare(queries[:BATCH])).numpy() == exact[:BATCH]).mean()
        qps, p50 = measure(served, queries, args.budget, prepare)
        rows.append((n, dim, "serve_search", qps, p50, size, "same ids as flat: %.1f%%" % (100 * same)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for row in rows[-4:]:
        if row[0] == n and row[1] == dim:
            print_row(row)
    sys.stdout.flush()


def print_row(row):
    n, dim, path, qps, p50, size, note = row
    print("%8d %4d  %-18s %10.1f %10.3f %10.1f  %s" % (n, dim, path, qps, p50, size / 2**20, note))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--dims", default="384,256,128,64")
    parser.add_argument("--hnsw-max", type=int, default=100000, help="largest corpus an HNSW index is built for")
    parser.add_argument(
        "--budget", type=float, default=4.0, help="seconds spent at most on each timing (at least 5 calls)"
    )
    parser.add_argument("--workdir", default=os.path.join(ROOT, "out", "bench_retrieval"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    dims = [int(d) for d in args.dims.split(",")]

    from bert_whitening.backend import tf
    from bert_whitening.retrieval import faiss_indexes as retrieval

    faiss = retrieval.faiss()
    print(
        "machine: %s, %s, %d cores; faiss %s (%d threads), numpy %s, tensorflow %s; %s"
        % (
            platform.machine(),
            platform.processor() or "?",
            os.cpu_count(),
            faiss.__version__,
            faiss.omp_get_max_threads(),
            np.__version__,
            tf.__version__,
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )
    )
    print(
        "random unit vectors; %d queries, top %d; queries/s in batches of %d, p50 of one query"
        % (QUERIES, TOP_K, BATCH)
    )
    print("%8s %4s  %-18s %10s %10s %10s" % ("corpus", "k", "path", "queries/s", "p50 ms", "memory MiB"))
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        for dim in dims:
            run_size(n, dim, rng, args, rows)

    print("\ntargets (one run):")
    by = {(n, dim, path): (qps, p50, size) for n, dim, path, qps, p50, size, _ in rows}
    largest = max(sizes)
    if 128 in dims and 384 in dims:
        qps128, p50_128, size128 = by[(largest, 128, "faiss flat")]
        qps384, p50_384, size384 = by[(largest, 384, "faiss flat")]
        speed = qps128 / qps384
        print(
            "exact search (faiss flat), %d vectors, k=128 vs k=384: %.2fx queries/s (batch 64), "
            "%.2fx p50  >= 2.5x  %s" % (largest, speed, p50_384 / p50_128, "met" if speed >= 2.5 else "NOT met")
        )
        print(
            "index size, %d vectors, k=384 / k=128: %.2fx  >= 3x (to 1%%)  %s"
            % (largest, size384 / size128, "met" if size384 / size128 >= 2.97 else "NOT met")
        )
    for n in sizes:
        for dim in dims:
            flat, served = by[(n, dim, "faiss flat")][0], by[(n, dim, "serve_search")][0]
            print(
                "serve_search vs faiss flat, %7d x %3d: %.2fx the time per batch of 64  <= 1.5x  %s"
                % (n, dim, flat / served, "met" if flat / served <= 1.5 else "NOT met")
            )


if __name__ == "__main__":
    main()
