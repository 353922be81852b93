"""Spearman correlation between cosine similarity and gold labels, per split and setting.

Each split is encoded once; every requested ``(n_components, beta, gamma)`` is then evaluated
on the same vectors. As in the original chn/eval.py, the whitening of a task is fitted on both
sentences of every pair of all its splits (``fit_on="all"``), and each setting reports the
Spearman of every split, their plain average (``avg``) and their average weighted by split size
(``w-avg``). ``fit_on="train"`` or a list of files fits on data held apart from what is scored.
No TensorFlow is imported here; encoding is passed in as a function.
"""
import dataclasses
import itertools

import numpy as np
import scipy.stats

from bert_whitening.data import chunked, read_sentences
from bert_whitening.whitening import WhiteningStats, fit_whitening, l2_normalize

#: Sentences of a --fit-on file encoded at a time, so a corpus of any size fits in memory.
FILE_CHUNK = 8192


@dataclasses.dataclass
class Setting:
    n_components: int
    beta: float = 1.0
    gamma: float = 1.0

    @property
    def label(self):
        k = "raw" if self.n_components == 0 else "all" if self.n_components < 0 else self.n_components
        extra = "" if (self.beta, self.gamma) == (1.0, 1.0) else " b=%g g=%g" % (self.beta, self.gamma)
        return "k=%s%s" % (k, extra) if self.n_components else "raw"


def settings(n_components, betas=(1.0,), gammas=(1.0,)):
    """Every combination; ``n_components`` 0 (no whitening) is evaluated once, whatever beta and gamma."""
    found = []
    for k, beta, gamma in itertools.product(n_components, betas, gammas):
        setting = Setting(k) if k == 0 else Setting(k, beta, gamma)
        if setting not in found:
            found.append(setting)
    return found


def cosine_spearman(first, second, labels):
    """Spearman correlation of the row-wise cosine of two vector sets with the labels."""
    sims = (l2_normalize(first) * l2_normalize(second)).sum(axis=1)
    return float(scipy.stats.spearmanr(labels, sims).correlation)


def encode_splits(encode, splits):
    """``{split: (first_vectors, second_vectors, labels)}``; ``encode`` maps a list of sentences
    to an array. All sentences of the task go through one call, so they are sorted together."""
    sentences = [s for pairs in splits.values() for a, b, _ in pairs for s in (a, b)]
    vectors = np.asarray(encode(sentences), dtype=np.float64)
    encoded, start = {}, 0
    for split, pairs in splits.items():
        block = vectors[start:start + 2 * len(pairs)]
        encoded[split] = (block[0::2], block[1::2], np.array([label for _, _, label in pairs]))
        start += 2 * len(pairs)
    return encoded


def fit_statistics(encoded, fit_on="all", encode=None, skip_bad_lines=False):
    """Whitening statistics of the task's vectors (``all`` splits or ``train``) or of the
    sentences in a list of files (encoded with ``encode``)."""
    stats = WhiteningStats()
    if fit_on == "all":
        for first, second, _ in encoded.values():
            stats.update(first).update(second)
    elif fit_on == "train":
        if "train" not in encoded:
            raise ValueError("--fit-on train: this task has no train split (splits: %s)"
                             % ", ".join(encoded))
        stats.update(encoded["train"][0]).update(encoded["train"][1])
    else:
        for path in fit_on:
            for chunk in chunked(read_sentences(path, "auto", skip_bad_lines), FILE_CHUNK):
                stats.update(encode(chunk))
    return stats


def evaluate(encoded, stats, requested, allow_rank_deficient=False):
    """One result per setting: ``{"setting", "n_components" (resolved), "splits": {split:
    spearman}, "avg", "w-avg"}``, plus the fitted whitening (for its eigenvalues), or None
    when every setting is raw."""
    counts = np.array([len(labels) for _, _, labels in encoded.values()])
    fitted, results = {}, []
    for setting in requested:
        k = 0
        if setting.n_components:
            key = (setting.beta, setting.gamma)
            if key not in fitted:
                fitted[key] = fit_whitening(stats, beta=setting.beta, gamma=setting.gamma,
                                            allow_rank_deficient=True)
            whitening = fitted[key]
            k = whitening.components(setting.n_components, allow_rank_deficient)
        scores = {}
        for split, (first, second, labels) in encoded.items():
            if k:
                first, second = whitening.transform(first, k, True), whitening.transform(second, k, True)
            scores[split] = cosine_spearman(first, second, labels)
        values = np.array(list(scores.values()))
        results.append({"setting": setting.label, "n_components": k, "beta": setting.beta,
                        "gamma": setting.gamma, "splits": scores, "avg": float(values.mean()),
                        "w-avg": float(np.average(values, weights=counts))})
    return results, fitted.get((1.0, 1.0)) or next(iter(fitted.values()), None)
