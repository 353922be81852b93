"""The retrieval benchmark of a pair task and its metrics, by exact cosine (numpy only).

The benchmark, defined so that anyone can recompute it from a split of a pair task:

- a pair is *positive* when its label says the two sentences mean the same: label 1 when every
  label of the split is 0 or 1 (ATEC, BQ, LCQMC, PAWSX), else score >= 4 on the 0-5 scale of the
  STS tasks (STS-B, STS-B-en). Labels outside both scales are refused;
- queries: the distinct first sentences of the positive pairs, in file order;
- corpus: the distinct second sentences of all pairs of the split, in file order, then the
  distinct distractor sentences that are not already in it;
- the relevant items of a query: the second sentences of its positive pairs.

Search is exact cosine (vectors are L2-normalised, so a dot product); ties are ranked by corpus
position, lower first. MRR@10 is the mean over queries of 1/rank of the first relevant item in the
top 10 (0 when there is none); Recall@k the share of queries with any relevant item in the top k.
"""

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from bert_whitening.data import DataError, read_sentences

#: Score from which a 0-5 STS pair counts as positive.
POSITIVE_SCORE = 4.0
#: Depth of the ranking the metrics look at.
CUTOFF = 10
#: Rows of a query block in exact search: bounds the score matrix to block x corpus floats.
SEARCH_BLOCK = 256


#: The share of 0/1 labels above which a split with other labels too is taken for a 0/1 task with
#: stray labels, and refused, not read as 0-5 scores (where 0 and 1 are a fraction of the labels):
#: one label of 4.5 in a 0/1 task turned its positives from the pairs of label 1 to that one pair.
MOSTLY_BINARY = 0.9


def positive_labels(labels: np.ndarray, where: str = "labels") -> np.ndarray:
    """Which labels mark positive pairs (see the module docstring; `positive_rule` says which
    rule); ``where`` names the data in the error for labels on neither scale, or 0/1 labels
    but a few (`MOSTLY_BINARY`), naming the first of those by its pair's number."""
    labels = np.asarray(labels, dtype=np.float64)
    binary = np.isin(labels, (0.0, 1.0))
    if binary.all():
        return labels == 1.0
    outside = np.flatnonzero((labels < 0) | (labels > 5))
    if outside.size:
        raise DataError(
            "%s: pair %d's label is %g: labels are neither all 0/1 nor 0-5 scores"
            % (where, outside[0] + 1, labels[outside[0]])
        )
    if binary.mean() >= MOSTLY_BINARY:
        stray = int(np.flatnonzero(~binary)[0])
        raise DataError(
            "%s: pair %d's label is %g, where %d of the %d labels are 0 or 1: a 0/1 task with a stray label? "
            "(0/1 labels: positive at 1; 0-5 scores: at %g and above)"
            % (where, stray + 1, labels[stray], binary.sum(), len(labels), POSITIVE_SCORE)
        )
    return labels >= POSITIVE_SCORE


def positive_rule(labels) -> str:
    """Which pairs `positive_labels` takes for positive, in words."""
    if np.isin(np.asarray(labels, dtype=np.float64), (0.0, 1.0)).all():
        return "pairs labelled 1 (0/1 labels)"
    return "pairs scored %g or more (0-5 scores)" % POSITIVE_SCORE


@dataclasses.dataclass
class Benchmark:
    """Queries, corpus and relevance of one split, with the rows of the pairs they come from."""

    queries: list
    query_pairs: np.ndarray  # for each query, a pair whose first sentence it is
    corpus: list
    corpus_pairs: np.ndarray  # for each corpus item from the pairs, a pair whose second it is
    relevant: list  # for each query, the set of corpus positions of its relevant items

    @property
    def distractors(self):
        return self.corpus[len(self.corpus_pairs) :]


def build_benchmark(
    pairs: Sequence[tuple[str, str, float]], distractors: Iterable[str] = (), where: str = "pairs"
) -> Benchmark:
    """The benchmark of ``pairs`` (``[(sentence1, sentence2, label)]``) plus ``distractors``
    (an iterable of sentences)."""
    positive = positive_labels([label for _, _, label in pairs], where)
    corpus_position = {}
    for row, (_, second, _) in enumerate(pairs):
        corpus_position.setdefault(second, (len(corpus_position), row))
    query_position, relevant = {}, []
    for row, (first, second, _) in enumerate(pairs):
        if positive[row]:
            if first not in query_position:
                query_position[first] = (len(query_position), row)
                relevant.append(set())
            relevant[query_position[first][0]].add(corpus_position[second][0])
    corpus = list(corpus_position)
    extra = dict.fromkeys(s for s in distractors if s not in corpus_position)
    return Benchmark(
        queries=list(query_position),
        query_pairs=np.array([row for _, row in query_position.values()], dtype=np.int64),
        corpus=corpus + list(extra),
        corpus_pairs=np.array([row for _, row in corpus_position.values()], dtype=np.int64),
        relevant=relevant,
    )


def exact_search(queries: np.ndarray, corpus: np.ndarray, top_k: int = CUTOFF) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, scores)`` of the ``top_k`` largest dot products of each query row with the corpus
    rows, best first, ties by lower corpus position; exact, in blocks of queries."""
    queries, corpus = np.asarray(queries), np.asarray(corpus)
    block = lambda start: queries[start : start + SEARCH_BLOCK] @ corpus.T  # noqa: E731
    return _ranked(block, len(queries), len(corpus), top_k, np.result_type(queries, corpus))


def code_search(quantizer, queries: np.ndarray, corpus: np.ndarray, top_k: int = CUTOFF):
    """`exact_search` by the cosine of codes: the query and corpus unit rows encoded by
    ``quantizer`` (a `bert_whitening.codes.Quantizer`) and ranked by its ``cosine_matrix``, the
    one cosine of codes, ties by lower corpus position."""
    query_codes, corpus_codes = quantizer.encode(queries), quantizer.encode(corpus)
    block = lambda start: quantizer.cosine_matrix(query_codes[start : start + SEARCH_BLOCK], corpus_codes)  # noqa: E731
    return _ranked(block, len(query_codes), len(corpus_codes), top_k, np.float64)


def _ranked(block_scores, queries, corpus, top_k, dtype):
    """``(ids, scores)`` of the ``top_k`` best of each row of the score blocks ``block_scores(start)``
    (rows ``start`` to ``start + SEARCH_BLOCK`` of ``queries`` x ``corpus``), ties by lower id."""
    top_k = min(top_k, corpus)
    ids = np.zeros((queries, top_k), dtype=np.int64)
    scores = np.zeros((queries, top_k), dtype=dtype)
    for start in range(0, queries, SEARCH_BLOCK):
        block = block_scores(start)
        # Every item scoring at least the k-th best is a candidate, so ties at the cut are kept.
        kth = -np.partition(-block, top_k - 1, axis=1)[:, top_k - 1]
        for offset, row in enumerate(block):
            candidates = np.flatnonzero(row >= kth[offset])
            order = np.lexsort((candidates, -row[candidates]))[:top_k]
            ids[start + offset] = candidates[order]
            scores[start + offset] = row[candidates[order]]
    return ids, scores


def retrieval_metrics(ids: np.ndarray, relevant: Sequence[set[int]]) -> dict[str, float]:
    """``{"mrr@10", "recall@1", "recall@10"}`` of ranked ``ids`` (queries x at least 10 or the
    corpus size) against each query's set of relevant positions."""
    hits = np.array(
        [[item in wanted for item in row[:CUTOFF]] for row, wanted in zip(ids, relevant, strict=True)], dtype=bool
    ).reshape(len(relevant), -1)
    found = hits.any(axis=1)
    reciprocal = np.where(found, 1.0 / (hits.argmax(axis=1) + 1), 0.0)
    return {
        "mrr@10": float(reciprocal.mean()),
        "recall@1": float(hits[:, :1].any(axis=1).mean()),
        "recall@10": float(found.mean()),
    }


#: A cosine within this of the exact top k's last ties with it (both are `result_cosines`,
#: computed alike): identical vectors, sentences alike once tokenised, tie, and which of them
#: exact search lists is arbitrary.
TIE = 1e-6


def result_cosines(queries: np.ndarray, corpus: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each query's cosine with the ``corpus`` rows of its ``ids`` (``(n, m)``, unit vectors);
    -inf where an id is -1, FAISS' missing result."""
    ids = np.asarray(ids)
    cosines = np.einsum("qd,qmd->qm", np.asarray(queries, np.float32), np.asarray(corpus, np.float32)[ids])
    return np.where(ids >= 0, cosines, -np.inf)


def recall_against_exact(found: np.ndarray, exact: np.ndarray) -> float:
    """Recall of a search against exact search, ties counted: the mean share of each query's
    results whose cosine (``found``, `result_cosines`) is at least the last of the exact top k's
    (``exact``) less `TIE`. A search listing another of identical vectors misses nothing, where
    `overlap_at_k`, the share of the very ids, counts it a miss."""
    found, exact = np.asarray(found, np.float64), np.asarray(exact, np.float64)
    return float(np.mean((found >= exact[:, -1:] - TIE).sum(axis=1) / exact.shape[1]))


def overlap_at_k(approximate: np.ndarray, exact: np.ndarray) -> float:
    """The mean share of each query's exact top-k ids that the approximate top-k also returns:
    below `recall_against_exact` where identical vectors tie."""
    pairs = zip(approximate, exact, strict=True)
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in pairs]))


def read_distractors(paths: Iterable[str], skip_bad_lines: bool = False) -> Iterator[str]:
    """Sentences of distractor files (every line of a sentence file, both sentences of a pair)."""
    for path in paths:
        yield from read_sentences(path, "auto", skip_bad_lines)
