"""Token-id sequences as the model takes them: cut as bert4keras cuts, padded to one length.

numpy only: the encoder (`bert_whitening.encoding`) and the serving client
(`bert_whitening.serving`) share it without either importing the other.
"""

import logging

import numpy as np

logger = logging.getLogger(__name__)


def token_ids(tokenizer, text, maxlen):
    """Ids of ``[CLS] text [SEP]`` cut to ``maxlen`` exactly as bert4keras' ``encode`` cuts.

    bert4keras drops the token before ``[SEP]`` until the sequence fits, which keeps the first
    ``maxlen - 2`` tokens; this does the same in one slice. Returns the ids and whether they
    were cut. An empty sentence is ``[CLS] [SEP]``.
    """
    ids = tokenizer.encode(text)[0]
    if len(ids) <= maxlen:
        return ids, False
    return ids[: maxlen - 1] + ids[-1:], True


def log_truncated(truncated, total, maxlen):
    """Say how many of ``total`` sentences `token_ids` cut to ``maxlen``, once per encoding (a
    call, a stream, a training set, a Beam job), none when none were."""
    if truncated:
        logger.info("%d of %d sentences were longer than maxlen %d tokens and were truncated", truncated, total, maxlen)


def pad_ids(sequences):
    """Token-id lists padded with 0 to one length, as ``[batch, length]`` int32."""
    sequences = [list(map(int, s)) for s in sequences]
    padded = np.zeros((len(sequences), max(map(len, sequences), default=0)), dtype=np.int32)
    for row, sequence in enumerate(sequences):
        padded[row, : len(sequence)] = sequence
    return padded
