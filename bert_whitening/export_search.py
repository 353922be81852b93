"""Verifying an export's ``serve_search`` signature against FAISS in a fresh process.

The child loads the SavedModel as a server would, runs ``serve_search`` on the verification
sentences, embeds the same sentences with ``serving_default`` and searches those embeddings in a
FAISS ``IndexFlatIP`` of the same corpus vectors. The two rankings must agree rank by rank:
each returned id's own cosine must equal FAISS's score at that rank (so different ids pass only
where cosines tie, to the tolerance), and the returned scores must be those cosines.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from bert_whitening import retrieval


def mismatches(ids, scores, expected_ids, expected_scores, queries, corpus, tolerance):
    """``[(row, rank, id, expected id)]`` where a returned id's own cosine with its query (not
    the score returned beside it) differs from the expected score at that rank, or the score
    returned is not that cosine; plus the largest score difference. Different ids with equal
    cosines are ties, and pass."""
    cosines = np.einsum("qkd,qd->qk", np.asarray(corpus, np.float64)[ids], np.asarray(queries, np.float64))
    bad = (np.abs(cosines - expected_scores) > tolerance) | (np.abs(cosines - scores) > tolerance)
    found = [(int(row), int(rank), int(ids[row, rank]), int(expected_ids[row, rank]))
             for row, rank in zip(*np.nonzero(bad), strict=True)]
    return found, float(np.abs(scores - expected_scores).max())


def verify_search(directory, encoder, corpus, text, tolerance):
    """Run the child on the export in ``directory``; raise `ExportError` when it disagrees."""
    from bert_whitening.encoding import tokenize
    from bert_whitening.export import VERIFY_SENTENCES, ExportError
    from bert_whitening.serving import pad_ids

    sequences, _ = tokenize(encoder, VERIFY_SENTENCES)
    with tempfile.TemporaryDirectory() as scratch:
        np.save(os.path.join(scratch, "corpus.npy"), np.asarray(corpus, dtype=np.float32))
        np.savez(os.path.join(scratch, "request.npz"), input_ids=pad_ids(sequences),
                 text=np.array(VERIFY_SENTENCES if text else [], dtype=object))
        child = subprocess.run([sys.executable, "-m", "bert_whitening.export_search", directory,
                                scratch, str(tolerance)], capture_output=True, text=True)
        if child.returncode != 0:
            raise ExportError("serve_search failed to load or run in a fresh process:\n"
                              + child.stderr[-3000:])
        with open(os.path.join(scratch, "result.json"), encoding="utf-8") as stream:
            result = json.load(stream)
    if result["mismatches"] or not result["score_difference"] <= tolerance:
        raise ExportError("serve_search disagrees with FAISS IndexFlatIP on the same vectors: "
                          "(row, rank, id, FAISS id) %s, scores differ by up to %.3g (tolerance "
                          "%.3g); nothing was written" % (result["mismatches"][:5],
                                                          result["score_difference"], tolerance))
    return result


def _child(directory, scratch, tolerance):
    from bert_whitening.backend import tf

    with np.load(os.path.join(scratch, "request.npz"), allow_pickle=True) as request:
        input_ids, text = request["input_ids"], list(request["text"])
    if text:
        import tensorflow_text  # noqa: F401  registers the tokenizer ops
    corpus = np.load(os.path.join(scratch, "corpus.npy"))
    loaded = tf.saved_model.load(directory)
    ids_input = {"input_ids": tf.constant(input_ids), "segment_ids": tf.zeros_like(input_ids)}
    embeddings = loaded.signatures["serving_default"](**ids_input)["embedding"].numpy()
    served = loaded.signatures["serve_search"](**({"text": tf.constant(text)} if text else ids_input))
    ids, scores = served["ids"].numpy(), served["scores"].numpy()
    expected_scores, expected_ids = retrieval.flat_index(corpus).search(embeddings, ids.shape[1])
    found, difference = mismatches(ids, scores, expected_ids, expected_scores, embeddings, corpus,
                                   float(tolerance))
    with open(os.path.join(scratch, "result.json"), "w", encoding="utf-8") as stream:
        json.dump({"mismatches": found, "score_difference": difference, "top_k": ids.shape[1],
                   "ids_dtype": str(ids.dtype), "scores_dtype": str(scores.dtype)}, stream)


if __name__ == "__main__":
    _child(*sys.argv[1:4])
