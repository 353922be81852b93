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
    norms = np.sqrt((vecs**2).sum(axis=1, keepdims=True))
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


class GoogleNames:
    """Parameters of a google-research/bert checkpoint: kernels are ``(in, out)``."""

    def __init__(self, weights):
        self.w = weights

    def embedding(self, kind):  # word, token_type, position
        return self.w["bert/embeddings/%s_embeddings" % kind]

    def norm(self, layer, where):  # where: embeddings, attention, output
        prefix = (
            "bert/embeddings/"
            if layer is None
            else "bert/encoder/layer_%d/%s" % (layer, "attention/output/" if where == "attention" else "output/")
        )
        return self.w[prefix + "LayerNorm/gamma"], self.w[prefix + "LayerNorm/beta"]

    def dense(self, layer, part):  # query, key, value, attention_output, intermediate, output
        path = {
            "query": "attention/self/query",
            "key": "attention/self/key",
            "value": "attention/self/value",
            "attention_output": "attention/output/dense",
            "intermediate": "intermediate/dense",
            "output": "output/dense",
        }[part]
        prefix = "bert/encoder/layer_%d/%s/" % (layer, path)
        return self.w[prefix + "kernel"], self.w[prefix + "bias"]

    def pooler(self):
        return self.w["bert/pooler/dense/kernel"], self.w["bert/pooler/dense/bias"]


class HuggingFaceNames:
    """Parameters of a transformers BertModel state dict: Linear weights are ``(out, in)``."""

    def __init__(self, tensors):
        self.w = tensors

    def embedding(self, kind):
        return self.w["embeddings.%s_embeddings.weight" % kind]

    def norm(self, layer, where):
        prefix = (
            "embeddings."
            if layer is None
            else "encoder.layer.%d.%s" % (layer, "attention.output." if where == "attention" else "output.")
        )
        return self.w[prefix + "LayerNorm.weight"], self.w[prefix + "LayerNorm.bias"]

    def dense(self, layer, part):
        path = {
            "query": "attention.self.query",
            "key": "attention.self.key",
            "value": "attention.self.value",
            "attention_output": "attention.output.dense",
            "intermediate": "intermediate.dense",
            "output": "output.dense",
        }[part]
        prefix = "encoder.layer.%d.%s." % (layer, path)
        return self.w[prefix + "weight"].T, self.w[prefix + "bias"]

    def pooler(self):
        return self.w["pooler.dense.weight"].T, self.w["pooler.dense.bias"]


def bert_hidden_states(params, config, ids, segments=None):
    """Hidden states after every block, ``[(length, hidden)] * layers``, for one unpadded sentence.

    ``params`` is a GoogleNames or HuggingFaceNames (a dict is taken as Google names).
    """
    params = GoogleNames(params) if isinstance(params, dict) else params
    ids = np.asarray(ids)
    segments = np.zeros_like(ids) if segments is None else np.asarray(segments)
    x = (
        params.embedding("word")[ids]
        + params.embedding("token_type")[segments]
        + params.embedding("position")[: len(ids)]
    )
    x = layer_norm(x, *params.norm(None, "embeddings"))
    heads = config["num_attention_heads"]
    size = config["hidden_size"] // heads
    states = []
    for layer in range(config["num_hidden_layers"]):

        def dense(v, part, layer=layer):
            kernel, bias = params.dense(layer, part)
            return v @ kernel + bias

        split = lambda v: v.reshape(len(ids), heads, size).transpose(1, 0, 2)
        q, k, v = (split(dense(x, part)) for part in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(1, 0, 2).reshape(len(ids), heads * size)
        x = layer_norm(x + dense(context, "attention_output"), *params.norm(layer, "attention"))
        x = layer_norm(x + dense(gelu(dense(x, "intermediate")), "output"), *params.norm(layer, "output"))
        states.append(x)
    return states


def pooled_reference(params, config, ids, pooling):
    """The sentence vector of the original get_encoder, for one unpadded sentence."""
    params = GoogleNames(params) if isinstance(params, dict) else params
    states = bert_hidden_states(params, config, ids)
    if pooling == "first-last-avg":
        return (states[0].mean(0) + states[-1].mean(0)) / 2
    if pooling == "last-avg":
        return states[-1].mean(0)
    if pooling == "cls":
        return states[-1][0]
    if pooling == "pooler":  # bert4keras with_pool='linear': the pooler Dense without tanh
        kernel, bias = params.pooler()
        return states[-1][0] @ kernel + bias
    raise ValueError(pooling)


def original_encode(bert, tokenizer, sentences, pooling="first-last-avg", maxlen=64, chunk=64, global_padding=False):
    """The original convert_to_vecs over get_encoder: first-last-avg / last-avg through Keras'
    mask-aware GlobalAveragePooling1D; cls the first position; pooler the output of a model built
    with_pool='linear'. The model runs ``chunk`` rows at a time. With ``global_padding`` the
    whole list is padded to its longest sentence, as the original does (benchmarks/bench_eval.py
    times that); without it, the sentences run in chunks of similar length (sorted here, then
    put back in order), each padded to its own longest: the padding is masked, so that changes
    float noise only (Chinese STS-B test with MiniLM's vocabulary: 57k tokens where chunks in
    order pad 105k and the whole list 174k).
    ``pooling`` may be a tuple of poolings: then one pass gives ``{pooling: vectors}``."""
    from bert_whitening.backend import keras

    poolings = [pooling] if isinstance(pooling, str) else list(pooling)
    blocks = [
        layer.output
        for layer in bert.layers
        if layer.name.startswith("Transformer-") and layer.name.endswith("-FeedForward-Norm")
    ]
    outputs = []
    for name in poolings:
        if name == "first-last-avg":
            outputs.append(
                keras.layers.Average()(
                    [
                        keras.layers.GlobalAveragePooling1D()(blocks[0]),
                        keras.layers.GlobalAveragePooling1D()(blocks[-1]),
                    ]
                )
            )
        elif name == "last-avg":
            outputs.append(keras.layers.GlobalAveragePooling1D()(blocks[-1]))
        elif name == "cls":
            outputs.append(keras.layers.Lambda(lambda x: x[:, 0])(blocks[-1]))
        else:
            outputs.append(bert.get_layer("Pooler-Dense").output)
    encoder = keras.Model(bert.inputs, outputs)
    ids = [tokenizer.encode(s, maxlen=maxlen)[0] for s in sentences]
    order = list(range(len(ids))) if global_padding else sorted(range(len(ids)), key=lambda i: len(ids[i]))
    longest = max(map(len, ids))
    chunks = []
    for start in range(0, len(ids), chunk):
        rows = [ids[i] for i in order[start : start + chunk]]
        padded = np.zeros((len(rows), longest if global_padding else max(map(len, rows))), dtype=np.int32)
        for row, sequence in enumerate(rows):
            padded[row, : len(sequence)] = sequence
        chunks.append(encoder.predict_on_batch([padded, np.zeros_like(padded)]))
    back = np.argsort(order)  # row i of the result is sentence i
    if isinstance(pooling, str):
        return np.concatenate(chunks)[back]
    return {name: np.concatenate([c[i] for c in chunks])[back] for i, name in enumerate(poolings)}


def original_split_vectors(bert, tokenizer, splits, pooling, maxlen=64, chunk=64, global_padding=False):
    """``{split: (first vectors, second vectors)}`` as chn/eval.py encodes them (`original_encode`;
    with a tuple of poolings, each array is a ``{pooling: vectors}``). With ``global_padding``
    each column of each split is one list, as in the original; without it, every distinct
    sentence of the task is encoded once (chunks of similar length anyway) and put in place."""
    if not global_padding:
        from bert_whitening.data import distinct_sentences

        sentences = distinct_sentences(splits)
        vectors = original_encode(bert, tokenizer, sentences, pooling, maxlen, chunk)
        row = {sentence: i for i, sentence in enumerate(sentences)}

        def rows(column):
            index = [row[s] for s in column]
            return vectors[index] if isinstance(pooling, str) else {name: v[index] for name, v in vectors.items()}

        return {
            split: (rows([a for a, _, _ in pairs]), rows([b for _, b, _ in pairs])) for split, pairs in splits.items()
        }
    return {
        split: (
            original_encode(bert, tokenizer, [a for a, _, _ in pairs], pooling, maxlen, chunk, global_padding),
            original_encode(bert, tokenizer, [b for _, b, _ in pairs], pooling, maxlen, chunk, global_padding),
        )
        for split, pairs in splits.items()
    }


def original_scores(vecs, splits, n_components_list):
    """chn/eval.py's scores of `original_split_vectors` (one pooling): ``{k: (scores per split,
    avg, w-avg)}`` with the kernel fitted on all splits."""
    full_kernel, bias = original_kernel_bias([v for pair in vecs.values() for v in pair])
    figures = {}
    for n_components in n_components_list:
        kernel = None if n_components == 0 else (full_kernel[:, :n_components] if n_components > 0 else full_kernel)
        scores = {}
        for split, (a, b) in vecs.items():
            a = original_transform_and_normalize(a, kernel, bias)
            b = original_transform_and_normalize(b, kernel, bias)
            scores[split] = spearman([label for _, _, label in splits[split]], (a * b).sum(axis=1))
        values = list(scores.values())
        figures[n_components] = (
            scores,
            np.average(values),
            np.average(values, weights=[len(p) for p in splits.values()]),
        )
    return figures


def original_eval(bert, tokenizer, splits, pooling, n_components_list, maxlen=64, chunk=64, global_padding=False):
    """chn/eval.py for one task, each split encoded once: ``{k: (scores per split, avg, w-avg)}``
    with the kernel fitted on all splits."""
    return original_scores(
        original_split_vectors(bert, tokenizer, splits, pooling, maxlen, chunk, global_padding),
        splits,
        n_components_list,
    )


def su_9079_kernel(x, beta, gamma):
    """kexue.fm/archives/9079 as written, row vectors: ``mu = mean(x_i)``,
    ``Sigma = 1/N sum (x_i - beta mu)^T (x_i - beta mu) = U Lambda U^T``, kernel
    ``U Lambda^(-gamma/2)``. Returns ``(beta * mu, kernel, eigenvalues)``, eigenvalues descending;
    ``y_i = (x_i - beta mu) @ kernel[:, :k]``, then L2-normalised."""
    shift = beta * x.mean(axis=0)
    sigma = (x - shift).T @ (x - shift) / len(x)
    eigenvalues, u = np.linalg.eigh(sigma)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues, u = eigenvalues[order], u[:, order]
    return shift, u @ np.diag(eigenvalues ** (-gamma / 2)), eigenvalues


def su_9079_whitening(x, beta, gamma, k=None):
    """``(y, kernel[:, :k], eigenvalues)`` of `su_9079_kernel`, with ``y`` the L2-normalised
    whitened ``x`` itself."""
    shift, kernel, eigenvalues = su_9079_kernel(x, beta, gamma)
    y = (x - shift) @ kernel[:, :k]
    return y / np.linalg.norm(y, axis=1, keepdims=True), kernel[:, :k], eigenvalues


def adam_steps(weights, gradients, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
    """Kingma and Ba's Algorithm 1 (arXiv:1412.6980), step by step: ``weights`` after one
    update per gradient of ``gradients``, with the epsilon on the bias-corrected root."""
    weights = np.asarray(weights, np.float64)
    m, v = np.zeros_like(weights), np.zeros_like(weights)
    for t, gradient in enumerate(gradients, 1):
        m = beta_1 * m + (1 - beta_1) * gradient
        v = beta_2 * v + (1 - beta_2) * np.square(gradient)
        m_hat, v_hat = m / (1 - beta_1**t), v / (1 - beta_2**t)
        weights = weights - learning_rate * m_hat / (np.sqrt(v_hat) + epsilon)
    return weights


def numpy_cosent(labels, cosines, scale=20.0):
    """CoSENT as its definition's double sum over ordered pairs of pairs (kexue.fm/archives/8847)."""
    total = 1.0
    for a in range(len(labels)):
        for b in range(len(labels)):
            if labels[a] > labels[b]:
                total += math.exp(scale * (cosines[b] - cosines[a]))
    return math.log(total)


def numpy_softmax(labels, first, second, kernel, bias):
    """Sentence-BERT's head: logits, log-softmax and the mean negative log-likelihood."""
    features = np.concatenate([first, second, np.abs(first - second)], axis=1).astype(np.float64)
    logits = features @ kernel + bias
    logits = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean([log_probabilities[row, label] for row, label in enumerate(labels)])


def reference_ranking(queries, corpus):
    """Every corpus position per query, by descending dot product then ascending position."""
    scores = [[float(np.dot(q, c)) for c in corpus] for q in queries]
    return [sorted(range(len(corpus)), key=lambda j: (-row[j], j)) for row in scores]


def reference_metrics(rankings, relevant):
    """MRR@10, Recall@1 and Recall@10 written out from their definitions, one query at a time."""
    reciprocal, at_1, at_10 = [], [], []
    for ranking, wanted in zip(rankings, relevant, strict=True):
        rank = next((position + 1 for position, item in enumerate(ranking[:10]) if item in wanted), None)
        reciprocal.append(1.0 / rank if rank else 0.0)
        at_1.append(ranking[0] in wanted)
        at_10.append(any(item in wanted for item in ranking[:10]))
    return {
        "mrr@10": sum(reciprocal) / len(reciprocal),
        "recall@1": sum(at_1) / len(at_1),
        "recall@10": sum(at_10) / len(at_10),
    }
