"""Independent, plainly written references for the tests.

- the numpy steps of the original chn/utils.py (np.cov, SVD, ``(x + bias).dot(kernel)``),
- the original encoding procedure (one padding length for everything, then a masked average),
- a numpy forward pass of a Google-format BERT, written from the BERT paper's equations,
  with the variable names of google-research/bert.
None of it uses the package, so the package is checked against something else than itself.
"""
import math

import numpy as np
import scipy.stats


def original_kernel_bias(vecs_list):
    vecs = np.concatenate(vecs_list, axis=0)
    mu = vecs.mean(axis=0, keepdims=True)
    cov = np.cov(vecs.T)
    u, s, _ = np.linalg.svd(cov)
    return u @ np.diag(1.0 / np.sqrt(s)), -mu


def original_transform_and_normalize(vecs, kernel=None, bias=None):
    if kernel is not None and bias is not None:
        vecs = (vecs + bias).dot(kernel)
    norms = np.sqrt((vecs ** 2).sum(axis=1, keepdims=True))
    return vecs / np.clip(norms, 1e-8, np.inf)


def spearman(labels, sims):
    return scipy.stats.spearmanr(labels, sims).correlation


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def bert_hidden_states(weights, config, ids, segments=None):
    """Hidden states after every block, ``[(length, hidden)] * layers``, for one unpadded sentence."""
    ids = np.asarray(ids)
    segments = np.zeros_like(ids) if segments is None else np.asarray(segments)
    w = lambda name: weights["bert/" + name]
    x = (w("embeddings/word_embeddings")[ids] + w("embeddings/token_type_embeddings")[segments]
         + w("embeddings/position_embeddings")[:len(ids)])
    x = layer_norm(x, w("embeddings/LayerNorm/gamma"), w("embeddings/LayerNorm/beta"))
    heads = config["num_attention_heads"]
    size = config["hidden_size"] // heads
    states = []
    for layer in range(config["num_hidden_layers"]):
        p = "encoder/layer_%d/" % layer
        dense = lambda v, name: v @ w(p + name + "/kernel") + w(p + name + "/bias")
        split = lambda v: v.reshape(len(ids), heads, size).transpose(1, 0, 2)
        q, k, v = (split(dense(x, "attention/self/" + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(1, 0, 2).reshape(len(ids), heads * size)
        x = layer_norm(x + dense(context, "attention/output/dense"),
                       w(p + "attention/output/LayerNorm/gamma"), w(p + "attention/output/LayerNorm/beta"))
        x = layer_norm(x + dense(gelu(dense(x, "intermediate/dense")), "output/dense"),
                       w(p + "output/LayerNorm/gamma"), w(p + "output/LayerNorm/beta"))
        states.append(x)
    return states


def pooled_reference(weights, config, ids, pooling):
    """The sentence vector of the original get_encoder, for one unpadded sentence."""
    states = bert_hidden_states(weights, config, ids)
    if pooling == "first-last-avg":
        return (states[0].mean(0) + states[-1].mean(0)) / 2
    if pooling == "last-avg":
        return states[-1].mean(0)
    if pooling == "cls":
        return states[-1][0]
    if pooling == "pooler":  # bert4keras with_pool='linear': the pooler Dense without tanh
        return states[-1][0] @ weights["bert/pooler/dense/kernel"] + weights["bert/pooler/dense/bias"]
    raise ValueError(pooling)
