"""BERT-flow (bert_whitening.flow) against a numpy flow written here from the formulas of Glow as
bohanli/BERT-flow's flow/glow_ops_1x1.py states them, and its use in the evaluation."""

import json
import math
import os
import re

import numpy as np
import pytest
import scipy.stats

from bert_whitening.backend import tf
from bert_whitening.config import EncoderConfig
from bert_whitening.errors import BertWhiteningError, FlowError
from bert_whitening.evaluation import (
    EvalOptions,
    Setting,
    evaluate,
    evaluate_tasks,
    fit_statistics,
    fit_statistics_and_vectors,
    format_table,
    settings,
)
from bert_whitening.flow import TRAINING_SUMMARY, ActNorm, Coupling, Flow, FlowConfig, InvertibleConv1x1, fit_flow
from bert_whitening.plots import plot_report
from bert_whitening.whitening import WhiteningStats, fit_whitening

from helpers import SENTENCES, original_eval_script, run

# --- the numpy flow -------------------------------------------------------------------------
# Glow's actnorm and zero layer scale by exp(3 logs) (logscale_factor 3); a split-off half and
# the top latent are standard normal; the objective is in bits per dimension.


def np_actnorm(x, b, logs, inverse=False):
    scale = np.exp(3.0 * logs)
    if inverse:
        return x / scale - b, -3.0 * logs.sum()
    return (x + b) * scale, 3.0 * logs.sum()


def np_conv(x, layer, inverse=False):
    """``x W``; W = P (strictly lower L + I) (strictly upper U + diag(sign_s exp(log_s))), or
    the reversal of the channels (the 0/1 matrix ``w[i, c-1-i] = 1`` of BERT-flow)."""
    channels = x.shape[1]
    if layer.permutation:
        w, log_det = np.eye(channels)[::-1], 0.0
    else:
        p, lower, upper, sign_s, log_s = (v.numpy() for v in (layer.P, layer.L, layer.U, layer.sign_s, layer.log_s))
        w = p @ (np.tril(lower, -1) + np.eye(channels)) @ (np.triu(upper, 1) + np.diag(sign_s * np.exp(log_s)))
        log_det = log_s.sum()
    if inverse:
        return np.linalg.solve(w.T, x.T).T, -log_det
    return x @ w, log_det


def np_coupling(x, layer, inverse=False):
    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    h = x1
    for kernel, norm in zip(layer.kernels, layer.norms, strict=True):
        h = np.maximum(np_actnorm(h @ kernel.numpy(), norm.b.numpy(), norm.logs.numpy())[0], 0.0)
    h = (h @ layer.out_kernel.numpy() + layer.out_bias.numpy()) * np.exp(3.0 * layer.out_logs.numpy())
    if not layer.affine:
        return np.hstack([x1, x2 - h if inverse else x2 + h]), 0.0
    shift, scale = h[:, 0::2], 1.0 / (1.0 + np.exp(-(h[:, 1::2] + 2.0)))
    log_det = np.log(scale).sum(axis=1)
    if inverse:
        return np.hstack([x1, x2 / scale - shift]), -log_det
    return np.hstack([x1, (x2 + shift) * scale]), log_det


def np_step(x, layer, inverse=False):
    if isinstance(layer, ActNorm):
        return np_actnorm(x, layer.b.numpy(), layer.logs.numpy(), inverse)
    return (np_conv if isinstance(layer, InvertibleConv1x1) else np_coupling)(x, layer, inverse)


def np_flow(flow, x):
    """``(z, log_det, nll in bits/dim)``: the levels in order, the second half of the channels
    split off after each but the last, z = the split-off halves then the top."""
    log_det, split_off = np.zeros(len(x)), []
    for level, steps in enumerate(flow.levels):
        for step in steps:
            for layer in step:
                x, step_log_det = np_step(x, layer)
                log_det = log_det + step_log_det
        if level < len(flow.levels) - 1:
            half = x.shape[1] // 2
            split_off.append(x[:, half:])
            x = x[:, :half]
    z = np.hstack(split_off + [x])
    log_prior = -0.5 * (z**2 + np.log(2 * np.pi)).sum(axis=1)
    return z, log_det, -(log_prior + log_det) / (np.log(2) * z.shape[1])


def randomised(flow, seed=0, scale=0.1):
    """Every trainable weight random (the zero-initialised ones too, so no coupling is the
    identity); P and sign_s stay a permutation and signs."""
    rng = np.random.default_rng(seed)
    for weight in flow.trainable_weights:
        weight.assign(rng.normal(scale=scale, size=weight.shape))
    return flow


def sample(rows=256, dim=16, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, dim)) @ rng.normal(size=(dim, dim)) * 0.5 + rng.normal(size=dim)


#: For tests of what surrounds training (seeds, files, settings): every layer kind, a fifth of the
#: default's time to trace a fit.
SMALL = {"n_levels": 2, "depth": 1}

CONFIGS = [
    None,
    {"coupling": "affine"},
    {"permutation": False},
    {"coupling": "affine", "permutation": False, "n_levels": 2, "depth": 2, "coupling_width": 8},
    {"n_levels": 1, "depth": 1},
]


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: ActNorm(16, rng),
        lambda rng: InvertibleConv1x1(16, True, rng),
        lambda rng: InvertibleConv1x1(16, False, rng),
        lambda rng: Coupling(16, False, 8, rng),
        lambda rng: Coupling(16, True, 8, rng),
    ],
    ids=["actnorm", "reversal", "lu-conv", "additive", "affine"],
)
def test_each_step_forward_inverse_and_log_det_match_numpy(make):
    layer = make(np.random.default_rng(0))
    rng = np.random.default_rng(1)
    for weight in layer.trainable_weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape))
    x = sample()
    y, log_det = layer(x)
    expected, expected_log_det = np_step(x, layer)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(log_det + np.zeros(len(x)), expected_log_det + np.zeros(len(x)), rtol=1e-10)
    back, back_log_det = layer(y, inverse=True)
    expected_back, expected_back_log_det = np_step(expected, layer, inverse=True)
    np.testing.assert_allclose(back.numpy(), expected_back, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(back_log_det + np.zeros(len(x)), -expected_log_det + np.zeros(len(x)), rtol=1e-10)
    assert np.abs(back.numpy() - x).max() < 1e-9


@pytest.mark.parametrize("config", CONFIGS)
def test_flow_matches_numpy_and_inverts(config):
    flow = randomised(Flow(16, config, np.random.default_rng(0)))
    x = sample()
    z, log_det = flow.forward(x)
    expected_z, expected_log_det, expected_nll = np_flow(flow, x)
    np.testing.assert_allclose(z.numpy(), expected_z, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(log_det + np.zeros(len(x)), expected_log_det, rtol=1e-9)
    np.testing.assert_allclose(flow.nll(x).numpy(), expected_nll, rtol=1e-9)
    np.testing.assert_allclose(flow.transform(x, batch_size=100), expected_z, rtol=1e-9, atol=1e-9)
    assert np.abs(flow.inverse(z).numpy() - x).max() < 1e-5


@pytest.mark.parametrize("config", CONFIGS[:4])
def test_log_det_is_that_of_the_jacobian(config):
    """Independent of the formulas: log|det dz/dx| by automatic differentiation."""
    flow = randomised(Flow(16, config, np.random.default_rng(0)))
    x = tf.constant(sample(rows=4))
    with tf.GradientTape() as tape:
        tape.watch(x)
        z = flow(x)
    jacobians = tape.batch_jacobian(z, x).numpy()
    _, log_det = flow.forward(x)
    np.testing.assert_allclose(log_det + np.zeros(4), np.linalg.slogdet(jacobians)[1], rtol=1e-8, atol=1e-8)


def test_data_init_gives_zero_mean_unit_variance():
    flow = Flow(16, {"data_init": True}, np.random.default_rng(0))
    x = sample()
    flow.initialize(x[:64])
    first = flow.levels[0][0][0]
    y = np_actnorm(x[:64], first.b.numpy(), first.logs.numpy())[0]
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(y.std(axis=0), 1.0, atol=1e-4)  # s / (s + 1e-6), Glow's epsilon
    coupling = flow.levels[0][0][2]
    inner = np_conv(y, flow.levels[0][0][1])[0][:, :8] @ coupling.kernels[0].numpy()
    inner = np_actnorm(inner, coupling.norms[0].b.numpy(), coupling.norms[0].logs.numpy())[0]
    np.testing.assert_allclose(inner.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(inner.std(axis=0), 1.0, atol=1e-4)


def test_without_data_init_actnorm_starts_glorot_uniform():
    """BERT-flow never runs its GlowInitHook: actnorm keeps U(+-sqrt(6 / (1 + channels)))."""
    flow = Flow(256, None, np.random.default_rng(0))
    values = np.concatenate([flow.levels[0][0][0].b.numpy(), flow.levels[0][0][0].logs.numpy()])
    bound = math.sqrt(6 / 257)
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.95 * bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound


def correlated_gaussian(rows=2048, dim=16, seed=5):
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(dim, dim)) / math.sqrt(dim)
    covariance = mixing @ mixing.T + 0.05 * np.eye(dim)
    vectors = rng.multivariate_normal(rng.normal(size=dim), covariance, size=rows)
    return vectors, covariance


def test_negative_log_likelihood_falls_to_the_gaussian_entropy():
    vectors, covariance = correlated_gaussian()
    dim = vectors.shape[1]
    entropy_bits = 0.5 * np.linalg.slogdet(2 * np.pi * np.e * covariance)[1] / (dim * np.log(2))
    start = Flow(dim, {"data_init": True}, np.random.default_rng(0))
    start.initialize(vectors[:64])
    trained = fit_flow(vectors, {"data_init": True}, seed=0, epochs=4, progress=False)
    before, after = np_flow(start, vectors)[2].mean(), np_flow(trained, vectors)[2].mean()
    assert before - after > 0.4, (before, after, entropy_bits)
    assert after - entropy_bits < 0.1, (after, entropy_bits)
    summary = trained.training_summary
    assert summary["steps"] == 4 * 2048 // 64 and summary["nll_last_steps"] < summary["nll_first_steps"] - 0.2


def test_one_step_is_adam_weight_decay_without_bias_correction():
    """optimization_bert_flow.py: m = 0.1 g, v = 0.001 g^2 after one step, g clipped to global
    norm 1 of twice the mean loss (0.5 of the mean), p -= lr (m / (sqrt(v) + 1e-6) + 0.01 p)."""
    vectors = sample(rows=64)
    start = Flow(16, SMALL, np.random.default_rng(7))
    before = [w.numpy() for w in start.trainable_weights]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(start.nll(vectors))
    gradients = [g.numpy() for g in tape.gradient(loss, start.trainable_weights)]
    norm = math.sqrt(sum((g**2).sum() for g in gradients))
    assert norm > 0.5  # the clip is exercised
    gradients = [g * 0.5 / norm for g in gradients]
    trained = fit_flow(vectors, SMALL, seed=7, progress=False)
    assert trained.training_summary["steps"] == 1
    for p, g, after in zip(before, gradients, trained.trainable_weights, strict=True):
        m, v = 0.1 * g, 0.001 * g**2
        np.testing.assert_allclose(after.numpy(), p - 1e-3 * (m / (np.sqrt(v) + 1e-6) + 0.01 * p), atol=1e-9)


def test_same_seed_same_vectors_and_save_load_round_trip(tmp_path):
    vectors = correlated_gaussian(rows=512)[0]
    first = fit_flow(vectors, SMALL, seed=3, progress=False)
    latents = first.transform(vectors)
    assert np.array_equal(fit_flow(vectors, SMALL, seed=3, progress=False).transform(vectors), latents)
    assert not np.allclose(fit_flow(vectors, SMALL, seed=4, progress=False).transform(vectors), latents)
    path = str(tmp_path / "flow.npz")
    first.save(path)
    loaded = Flow.load(path)
    assert np.array_equal(loaded.transform(vectors), latents)
    assert loaded.config == first.config == FlowConfig.of(SMALL) != FlowConfig()
    assert loaded.training_summary == dict(first.training_summary)
    assert list(first.training_summary) == list(TRAINING_SUMMARY)  # what a loaded file is held to
    assert os.listdir(tmp_path) == ["flow.npz"]


def test_load_refuses_what_is_not_a_flow(tmp_path):
    whitening = str(tmp_path / "whitening.npz")
    fit_whitening(WhiteningStats().update(sample())).save(whitening)
    for path, message in ((whitening, "not a readable flow file"), (str(tmp_path / "none.npz"), "no such flow file")):
        with pytest.raises(FlowError, match=message):
            Flow.load(path)


@pytest.mark.parametrize("pooling", ["max", 7])
def test_load_refuses_a_crafted_pooling_naming_the_file(tmp_path, pooling):
    """Once refused only when an encoder was built, as ``unknown pooling 'max'`` (7: as a file of
    the wrong type), naming no file."""
    path = str(tmp_path / "flow.npz")
    fit_flow(sample(), SMALL, seed=0, progress=False, pooling="cls").save(path)
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["meta"] = np.array(json.dumps({**json.loads(str(arrays["meta"])), "pooling": pooling}))
    np.savez(tmp_path / "crafted.npz", **arrays)
    with pytest.raises(
        FlowError, match=re.escape("%s: its pooling is %r, expected one of ''" % (tmp_path / "crafted.npz", pooling))
    ):
        Flow.load(str(tmp_path / "crafted.npz"))


def test_config_reads_bert_flow_files_and_refuses_the_rest():
    # flow/config/config_l3_d3_w32.json and config_l2_d2_w32.json of bohanli/BERT-flow
    default = {
        "latent_architecture": "glow_resnet",
        "activation": "relu",
        "coupling": "additive",
        "coupling_width": 32,
        "coupling_dropout": 0.0,
        "top_prior": "normal",
        "n_levels": 3,
        "depth": 3,
        "permutation": True,
        "use_fp16": False,
    }
    assert FlowConfig.of(default) == FlowConfig() == FlowConfig.of(None)
    assert FlowConfig.of({**default, "n_levels": 2, "depth": 2}) == FlowConfig(n_levels=2, depth=2)
    assert FlowConfig.of({"permutation": np.False_}).permutation is False  # kept as JSON writes it
    with pytest.raises(FlowError, match="^flow permutation must be True or False, got str 'false'$"):
        FlowConfig(permutation="false")  # built directly, not through FlowConfig.of
    for bad, message in (
        ({"activation": "gatu"}, "activation must be 'relu'"),
        ({"levels": 2}, "unknown"),
        ({"coupling": "spline"}, "additive or affine"),
        ({"depth": 0}, "depth is 0, expected a whole number from 1 to"),
    ):
        with pytest.raises(FlowError, match=message):
            FlowConfig.of(bad)
    with pytest.raises(FlowError, match="divisible by 8, got 12"):
        Flow(12)
    with pytest.raises(FlowError, match="no training step"):
        fit_flow(sample(rows=63), progress=False)


# --- in the evaluation ----------------------------------------------------------------------


def test_settings_with_methods():
    labels = lambda found: [setting.label for setting in found]
    assert labels(settings([0, -1, 8], methods=("whitening", "flow"), seeds=(0, 1, 0))) == [
        "raw",
        "k=all",
        "k=8",
        "flow s=0",
        "flow s=1",
    ]
    assert settings([0, -1], methods=("flow",)) == [Setting(0), Setting(-1, method="flow", seed=0)]
    assert settings([-1]) == [Setting(-1)]
    with pytest.raises(BertWhiteningError, match="unknown method 'glow'"):
        settings([0], methods=("glow",))


def test_evaluate_scores_flows_beside_whitening_on_the_same_vectors():
    """Pairs whose second vector is the first plus noise; the label is minus the noise level."""
    rng = np.random.default_rng(2)
    base, encoded = correlated_gaussian(rows=600)[0], {}
    for split, rows in (("train", slice(0, 300)), ("test", slice(300, 600))):
        labels = rng.random(300)
        encoded[split] = (base[rows], base[rows] + rng.normal(size=(300, 16)) * labels[:, None] * 0.3, -labels)
    stats, vectors = fit_statistics_and_vectors(encoded)
    assert vectors.shape == (1200, 16)
    np.testing.assert_array_equal(fit_statistics_and_vectors(encoded, "train")[1], np.vstack(encoded["train"][:2]))
    np.testing.assert_array_equal(stats.scatter, fit_statistics(encoded).scatter)  # as without a flow, bit for bit
    requested = settings([0, -1], methods=("whitening", "flow"), seeds=(0, 1))
    options = {"progress": False, "config": SMALL}
    results, whitening = evaluate(encoded, stats, requested, vectors=vectors, flow_options=options)
    assert [r["setting"] for r in results] == ["raw", "k=all", "flow s=0", "flow s=1"]
    assert [r["method"] for r in results] == ["raw", "whitening", "flow", "flow"]
    assert results[0]["fit_seconds"] is None and all(r["fit_seconds"] > 0 for r in results[1:])
    assert whitening.count == 1200
    assert all(r["n_components"] == 16 and r["beta"] is None and r["training"]["steps"] == 18 for r in results[2:])
    flow = fit_flow(vectors, SMALL, seed=1, progress=False)
    for split, (first, second, labels) in encoded.items():
        a, b = flow.transform(first), flow.transform(second)
        cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert abs(results[3]["splits"][split] - scipy.stats.spearmanr(labels, cosines)[0]) < 1e-12
    assert results[2]["splits"] != results[3]["splits"]
    alone, _ = evaluate(encoded, stats, requested[:2])
    assert [r["splits"] for r in alone] == [r["splits"] for r in results[:2]]


@pytest.mark.slow
def test_evaluate_tasks_and_eval_py_with_the_flow(tiny_model, tmp_path, capsys):
    task_dir = tmp_path / "data" / "STS-B"
    task_dir.mkdir(parents=True)
    pairs = [
        "%s\t%s\t%d\n" % (SENTENCES[i % 16], SENTENCES[(i * 7 + 3) % 16] + "的" * (i % 5), i % 6) for i in range(96)
    ]
    for split, part in (("train", pairs[:64]), ("test", pairs[64:])):
        (task_dir / ("STS-B.%s.data" % split)).write_text("".join(part), encoding="utf-8")
    spec = EncoderConfig(tiny_model[0])
    report, spectra = evaluate_tasks(
        spec,
        ["STS-B"],
        EvalOptions(
            directory=str(tmp_path / "data"),
            n_components=[0, -1],
            methods=("whitening", "flow"),
            flow_options={"progress": False},
        ),
    )
    task = report["tasks"]["STS-B"]
    assert [r["setting"] for r in task["results"]] == ["raw", "k=all", "flow s=0"]
    alone = evaluate_tasks(spec, ["STS-B"], EvalOptions(directory=str(tmp_path / "data"), n_components=[0, -1]))[0]
    assert [result["splits"] for result in alone["tasks"]["STS-B"]["results"]] == [
        result["splits"] for result in task["results"][:2]
    ]  # bit for bit: the flow beside them changes nothing
    assert task["results"][2]["training"]["vectors"] == 192 and task["results"][2]["training"]["steps"] == 3
    assert format_table("STS-B", report).splitlines()[-1].split()[:4] == ["STS-B", "fit", "s", "-"]
    plot_report(report, spectra, str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    corpus = tmp_path / "corpus.txt"  # the train split's sentences, in the order of fit_statistics_and_vectors
    corpus.write_text(
        "".join(line.split("\t")[side] + "\n" for side in (0, 1) for line in pairs[:64]), encoding="utf-8"
    )
    flows = [
        evaluate_tasks(
            spec,
            ["STS-B"],
            EvalOptions(
                directory=str(tmp_path / "data"),
                n_components=[],
                fit_on=fit_on,
                methods=("flow",),
                flow_options={"progress": False, "config": SMALL},
            ),
        )[0]["tasks"]["STS-B"]["results"][0]
        for fit_on in ([str(corpus)], "train")
    ]
    assert [flow["training"]["vectors"] for flow in flows] == [128, 128]
    np.testing.assert_allclose(list(flows[0]["splits"].values()), list(flows[1]["splits"].values()), atol=1e-4)

    root = tmp_path / "models"
    root.mkdir()
    os.symlink(tiny_model[0], root / "chinese_L-12_H-768_A-12")
    argv = ["BERT", "first-last-avg", "STS-B", "0", "--model-root", str(root), "--data-dir", str(tmp_path / "data")]
    capsys.readouterr()
    assert original_eval_script().main(argv + ["--method", "flow"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == ["STS-B-train", "STS-B-test", "avg", "w-avg"]
    flow_result = task["results"][2]
    np.testing.assert_allclose(
        [float(line.split(": ")[1]) for line in lines],
        list(flow_result["splits"].values()) + [flow_result["avg"], flow_result["w-avg"]],
        atol=1e-6,
    )


# --- a trained flow in place of the whitening ------------------------------------------------


@pytest.fixture(scope="module")
def flow_file(tiny_model, tmp_path_factory):
    """``(model, sentences file, flow file)``: a flow trained by ``fit --method flow`` on the
    cls vectors of 128 sentences."""
    directory = tmp_path_factory.mktemp("flow")
    sentences = directory / "sentences.txt"
    sentences.write_text("".join("%s %d\n" % (s, i) for i in range(8) for s in SENTENCES), encoding="utf-8")
    path = directory / "flow.npz"
    argv = ["fit", "--method", "flow", "--seed", "1", "--pooling", "cls", "--model", tiny_model[0]]
    assert run(*argv, "--output", path, sentences) == 0
    return tiny_model[0], sentences, path


def flow_vectors(model, sentences, path):
    """What ``--flow`` must give, computed apart: the pooled vectors through the numpy flow."""
    from bert_whitening import SentenceEncoder

    pooled = SentenceEncoder.load(model, pooling="cls", normalize=False).encode(sentences)
    latents = np_flow(Flow.load(str(path)), pooled.astype(np.float64))[0]
    return latents / np.linalg.norm(latents, axis=1, keepdims=True)


def test_fit_method_flow_writes_a_flow_of_that_encoder(flow_file):
    model, sentences, path = flow_file
    flow = Flow.load(str(path))
    assert flow.pooling == "cls" and flow.model_identity["hidden_size"] == flow.dim == 24
    assert flow.training_summary["seed"] == 1 and flow.training_summary["vectors"] == 128


@pytest.mark.slow  # an export
def test_encode_and_an_export_with_the_flow_give_its_latents(flow_file, tmp_path):
    import json

    from bert_whitening.io.files import file_sha256

    model, sentences, path = flow_file
    expected = flow_vectors(model, SENTENCES, path)
    corpus = tmp_path / "some.txt"
    corpus.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    assert run("encode", "--model", model, "--flow", path, "--output", tmp_path / "v.npy", corpus) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-5)

    base = tmp_path / "served"
    assert run("export", "--model", model, "--flow", path, "--text", "--output", base) == 0
    loaded = tf.saved_model.load(str(base / "1"))
    served = loaded.signatures["serve_text"](text=tf.constant(SENTENCES))["embedding"].numpy()
    # The SavedModel runs plain layer norms (`serving_graph`), whose rounding the flow amplifies
    # past 1e-5 of the numpy flow on some CPUs; the export's own verification holds it to 1e-5
    # of the Keras model.
    np.testing.assert_allclose(served, expected, atol=3e-5)
    record = json.loads((base / "1" / "assets" / "bert_whitening.json").read_text(encoding="utf-8"))
    assert record["flow"]["sha256"] == file_sha256(str(path)) and record["whitening"] is None
    assert record["pooling"] == "cls" and record["n_components"] == 0


def test_a_flow_is_refused_with_a_whitening_with_k_and_on_another_pooling(flow_file, tmp_path, caplog):
    model, sentences, path = flow_file
    whitening = tmp_path / "w.npz"
    assert run("fit", "--model", model, "--pooling", "cls", "--output", whitening, sentences) == 0
    out = tmp_path / "v.npy"
    cases = [
        (["--whitening", whitening], "a flow takes the place of the whitening"),
        (["--n-components", "4"], "a flow keeps every dimension"),
        (["--pooling", "first-last-avg"], "the flow was fitted on cls pooling, the encoder uses first-last-avg"),
    ]
    for options, message in cases:
        caplog.clear()
        assert run("encode", "--model", model, "--flow", path, *options, "--output", out, sentences) == 1
        assert message in caplog.text
    caplog.clear()
    assert run("fit", "--method", "flow", "--model", model, "--beta", "0", "--output", out, sentences) == 1
    assert "a flow has none of them" in caplog.text
    assert not out.exists()


def test_an_index_keeps_its_flow_and_refuses_one_edited_afterwards(flow_file, tmp_path, capsys, caplog):
    import json

    model, sentences, path = flow_file
    index = tmp_path / "index"
    assert run("index", "--model", model, "--flow", path, "--output", index, sentences) == 0
    assert sorted(os.listdir(index)) == ["flow.npz", "index.faiss", "index.json", "keys.tsv", "texts.jsonl"]
    capsys.readouterr()
    query = SENTENCES[2] + " 3"
    assert run("search", "--index", index, "--format", "json", "--top-k", "1", query) == 0
    top = json.loads(capsys.readouterr().out)[0]["hits"][0]
    # the tiny vocabulary has no digits: the 8 numbered copies of a sentence encode alike
    assert top["text"].startswith(SENTENCES[2] + " ") and top["score"] == pytest.approx(1, abs=1e-5)
    edited = Flow.load(str(index / "flow.npz"))
    randomised(edited, seed=9)
    edited.save(str(index / "flow.npz"))
    caplog.clear()
    assert run("search", "--index", index, query) == 1
    assert "flow.npz is not the file this index was built with" in caplog.text


@pytest.mark.parametrize(
    "options, message",
    [
        ({"learning_rate": float("nan")}, "^learning_rate must be a finite number above 0, got nan$"),
        ({"learning_rate": float("inf")}, "^learning_rate must be a finite number above 0, got inf$"),
        ({"learning_rate": -1}, "^learning_rate must be a finite number above 0, got -1$"),
        ({"epochs": float("inf")}, "^epochs must be a number above 0"),
        ({"seed": "x"}, "^seed must be a whole number, got str 'x'$"),
        ({"config": "x"}, "^config must be a FlowConfig, a dict or None, got str 'x'$"),
        # a str is true to Python: "false" built a flow with a permutation
        ({"config": {"permutation": "false"}}, "^flow permutation must be True or False, got str 'false'$"),
        ({"config": {"permutation": "no"}}, "^flow permutation must be True or False, got str 'no'$"),
        ({"config": {"data_init": "false"}}, "^flow data_init must be True or False, got str 'false'$"),
        ({"config": {"data_init": 1}}, "^flow data_init must be True or False, got int 1$"),
        ({"batch_size": 0}, "^batch_size must be a positive integer, got 0$"),
        (
            {"epochs": 1, "batch_size": 512},
            r"^256 vectors, 1 epochs and batches of 512 vectors make no training step: "
            r"set batch_size to at most 256 \(or raise epochs, or give more sentences\)$",
        ),
    ],
)
def test_fit_flow_refuses_its_options_in_one_line_naming_them(options, message):
    with pytest.raises(FlowError, match=message):
        fit_flow(sample(), **{"config": SMALL, "progress": False, **options})


def test_a_diverged_training_is_refused_and_such_a_flow_is_never_written(tmp_path):
    with pytest.raises(FlowError, match="^the flow's training diverged: its weights hold NaN or inf after 16 steps"):
        fit_flow(sample(rows=1024), SMALL, learning_rate=1e300, progress=False)
    flow = fit_flow(sample(), SMALL, progress=False)
    flow.trainable_weights[0].assign(np.full(flow.trainable_weights[0].shape, np.nan))
    with pytest.raises(FlowError, match="NaN or inf .*not written"):
        flow.save(str(tmp_path / "flow.npz"))
    assert os.listdir(tmp_path) == []


def test_eval_of_flows_alone_takes_no_whitening_k(tiny_model, tmp_path):
    """Its default k (0,-1,256) were checked against the tiny model's 24 dimensions and refused,
    though a flow keeps every dimension and no whitening was asked for."""
    from bert_whitening import cli

    (tmp_path / "T").mkdir()
    pairs = "".join(
        "%s\t%s\t%d\n" % (SENTENCES[i % 16], SENTENCES[(i * 7 + 3) % 16] + "的" * (i % 5), i % 6) for i in range(48)
    )
    (tmp_path / "T" / "T.test.data").write_text(pairs, encoding="utf-8")
    argv = ["eval", "--model", tiny_model[0], "--task", "T", "--data-dir", str(tmp_path), "--method", "flow"]
    assert cli.main(argv + ["--json", str(tmp_path / "r.json")]) == 0
    assert [r["setting"] for r in json.loads((tmp_path / "r.json").read_text())["tasks"]["T"]["results"]] == [
        "raw",
        "flow s=0",
    ]


def test_evaluate_tasks_refuses_flow_options_before_a_model_is_built(monkeypatch):
    import bert_whitening.evaluation as evaluation

    monkeypatch.setattr(evaluation, "load_tasks", lambda *args: pytest.fail("a model was loaded"))
    for options, message in (({"epoch": 2}, "unknown flow option 'epoch'"), ({"learning_rate": 0}, "learning_rate")):
        with pytest.raises(FlowError, match=message):
            evaluate_tasks(EncoderConfig("unused"), ["STS-B"], EvalOptions(methods=("flow",), flow_options=options))
    with pytest.raises(FlowError, match="^seed must be a whole number >= 0, got -2$"):
        evaluate_tasks(EncoderConfig("unused"), ["STS-B"], EvalOptions(methods=("flow",), flow_seeds=(0, -2)))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"epoch": 2}, r"^unknown flow option 'epoch' \(did you mean epochs\?\)$"),
        ({"seed": 3}, "^flow_options cannot hold seed: flow_seeds gives each flow's$"),
        ({"batch_size": 0}, "^batch_size must be a positive integer, got 0$"),
    ],
)
def test_evaluate_refuses_flow_options_before_anything_is_fitted(monkeypatch, options, message):
    """Through `evaluate` (not `evaluate_tasks`) a misspelt option was Python's TypeError, once
    the whitenings before it were fitted."""
    import bert_whitening.evaluation as evaluation

    monkeypatch.setattr(evaluation, "fit_whitening", lambda *args, **kwargs: pytest.fail("a whitening was fitted"))
    vectors = sample(rows=64)
    encoded = {"test": (vectors[:32], vectors[32:], np.arange(32.0))}
    requested = settings([0, -1], methods=("whitening", "flow"), seeds=(0,))
    with pytest.raises(FlowError, match=message):
        evaluate(encoded, WhiteningStats().update(vectors), requested, vectors=vectors, flow_options=options)


def test_the_command_line_sets_how_a_flow_trains(tiny_model, tmp_path, caplog):
    """The flow's epochs, batch and learning rate had no flags: BERT-flow's defaults only."""
    from bert_whitening import cli
    from bert_whitening.flow import Flow

    (tmp_path / "T").mkdir()
    pairs = "".join(
        "%s\t%s\t%d\n" % (SENTENCES[i % 16], SENTENCES[(i * 7 + 3) % 16] + "的" * (i % 5), i % 6) for i in range(48)
    )
    (tmp_path / "T" / "T.test.data").write_text(pairs, encoding="utf-8")
    training = ["--flow-epochs", "2", "--flow-batch-size", "8", "--flow-learning-rate", "0.01"]
    model = ["--model", tiny_model[0]]
    data = str(tmp_path / "T" / "T.test.data")
    assert cli.main(["fit", *model, "--method", "flow", *training, "--output", str(tmp_path / "f.npz"), data]) == 0
    summary = Flow.load(str(tmp_path / "f.npz")).training_summary
    assert (summary["epochs"], summary["batch_size"], summary["learning_rate"]) == (2, 8, 0.01)
    assert summary["steps"] == 96 * 2 // 8
    argv = ["eval", *model, "--task", "T", "--data-dir", str(tmp_path), "--method", "flow", *training]
    assert cli.main(argv + ["--json", str(tmp_path / "r.json")]) == 0
    flow = json.loads((tmp_path / "r.json").read_text())["tasks"]["T"]["results"][1]["training"]
    assert (flow["epochs"], flow["batch_size"], flow["learning_rate"]) == (2, 8, 0.01)
    assert cli.main(["fit", *model, "--flow-epochs", "2", "--output", str(tmp_path / "w.npz"), data]) == 1
    assert "train a flow: add --method flow" in caplog.text
    assert (
        cli.main(["eval", *model, "--task", "T", "--data-dir", str(tmp_path), "--flow-seeds", "3"]) == 1
    )  # was ignored
    assert caplog.messages[-1] == "--flow-seeds are the flows' seeds: add --method whitening,flow (or flow)"
    with pytest.raises(SystemExit):
        cli.main(["fit", *model, "--method", "flow", "--flow-epochs", "0", "--output", str(tmp_path / "x.npz"), data])
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "x.npz").exists()


def test_the_first_and_last_steps_of_a_short_run_do_not_overlap():
    from bert_whitening.flow import _first_and_last

    assert _first_and_last([6.0, 5.0, 4.0, 3.0, 2.0, 1.0]) == (5.0, 2.0)
    assert _first_and_last(list(map(float, range(40, 0, -1)))) == (35.5, 5.5)
    assert _first_and_last([3.0]) == (3.0, 3.0)


def test_a_flow_records_its_tokenization_and_refuses_a_crafted_one(tmp_path):
    path = str(tmp_path / "flow.npz")
    fit_flow(
        sample(), SMALL, seed=0, progress=False, pooling="cls", tokenization={"maxlen": 32, "lowercase": True}
    ).save(path)
    assert Flow.load(path).tokenization == {"maxlen": 32, "lowercase": True}
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["meta"] = np.array(
        json.dumps({**json.loads(str(arrays["meta"])), "tokenization": {"maxlen": 1, "lowercase": True}})
    )
    np.savez(tmp_path / "crafted.npz", **arrays)
    with pytest.raises(FlowError, match=re.escape("%s: its tokenization is {'maxlen': 1" % (tmp_path / "crafted.npz"))):
        Flow.load(str(tmp_path / "crafted.npz"))


@pytest.mark.parametrize(
    "vectors, message",
    [
        (lambda x: x.astype(str), "vectors: holds <U"),  # numpy parsed the strings as numbers
        (lambda x: x > 0, "vectors: holds bool, expected vectors of real numbers"),
        (lambda x: x + 1j, "vectors: holds complex128"),  # the imaginary part was dropped with a warning
    ],
)
def test_a_flow_takes_the_vectors_the_statistics_take(vectors, message):
    """Trained on or applied to: the same refusal as `WhiteningStats.update`'s."""
    x = sample(rows=64)
    with pytest.raises(FlowError, match="^" + re.escape(message)):
        fit_flow(vectors(x), SMALL, progress=False)
    flow = Flow(16, FlowConfig(**SMALL))
    with pytest.raises(FlowError, match="^" + re.escape(message)):
        flow.transform(vectors(x))
    with pytest.raises(BertWhiteningError, match="^batch_size must be a positive integer, got 0$"):
        flow.transform(x, batch_size=0)


def test_a_flow_refuses_vectors_of_another_dimension_and_names_a_non_finite_row():
    """Said 'expected vectors of shape (n, 16)' and 'vectors contain NaN or inf', no row named."""
    x, flow = sample(rows=64), Flow(16, FlowConfig(**SMALL))
    with pytest.raises(FlowError, match=r"^vectors: vectors of dimension 15, the flow's is 16$"):
        flow.transform(x[:, 1:])
    x[5, 3] = np.inf
    for apply in (flow.transform, lambda x: fit_flow(x, SMALL, progress=False)):
        with pytest.raises(
            BertWhiteningError, match=r"^vectors: row 5 \(0-based\): the vector holds inf \(column 3\)$"
        ):
            apply(x)


def test_two_steps_carry_the_moments_over_the_batches_the_seed_draws():
    """Two steps on 128 vectors: batches of 64 in the order ``numpy.random.default_rng(seed)``
    draws once the flow's start is drawn, and AdamWeightDecay's moments carried from the first
    step to the second (m = 0.9 m + 0.1 g, v = 0.999 v + 0.001 g^2), each step's gradient that
    of the mean NLL of its batch clipped to global norm 0.5."""
    vectors = sample(rows=128)
    rng = np.random.default_rng(7)
    start = Flow(16, SMALL, rng)
    order = rng.permutation(128)
    weights = [w.numpy() for w in start.trainable_weights]
    m, v = [np.zeros_like(w) for w in weights], [np.zeros_like(w) for w in weights]
    for batch in (order[:64], order[64:]):
        for variable, value in zip(start.trainable_weights, weights, strict=True):
            variable.assign(value)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(start.nll(vectors[batch]))
        gradients = [g.numpy() for g in tape.gradient(loss, start.trainable_weights)]
        norm = math.sqrt(sum((g**2).sum() for g in gradients))
        gradients = [g * min(1.0, 0.5 / norm) for g in gradients]
        m = [0.9 * a + 0.1 * g for a, g in zip(m, gradients, strict=True)]
        v = [0.999 * a + 0.001 * g**2 for a, g in zip(v, gradients, strict=True)]
        weights = [p - 1e-3 * (a / (np.sqrt(b) + 1e-6) + 0.01 * p) for p, a, b in zip(weights, m, v, strict=True)]
    trained = fit_flow(vectors, SMALL, seed=7, progress=False)
    assert trained.training_summary["steps"] == 2
    for expected, after in zip(weights, trained.trainable_weights, strict=True):
        np.testing.assert_allclose(after.numpy(), expected, atol=1e-9)


@pytest.mark.parametrize("initialised", [False, True], ids=["uniform start", "started on the first batch"])
def test_a_fractional_epoch_takes_whole_batches_across_passes_and_records_their_nll(initialised):
    """100 vectors, 1.5 epochs of batches of 64: int(150 / 64) = 2 steps (no partial batch), the
    second batch running on into a second shuffle of the vectors; at a learning rate that leaves
    the flow as it started (1e-12), the NLLs recorded are each batch's mean, in bits per
    dimension, of the numpy flow. Glow's start on data is made on the first batch of the shuffle."""
    vectors = sample(rows=100, seed=3)
    config = {**SMALL, "data_init": initialised}
    rng = np.random.default_rng(2)
    start = Flow(16, config, rng)
    order = np.concatenate([rng.permutation(100), rng.permutation(100)])
    if initialised:
        start.initialize(vectors[order[:64]])
    trained = fit_flow(vectors, config, seed=2, epochs=1.5, learning_rate=1e-12, progress=False)
    if initialised:  # the first actnorm centres the first batch
        np.testing.assert_allclose(trained.levels[0][0][0].b.numpy(), -vectors[order[:64]].mean(axis=0), atol=1e-9)
    summary = trained.training_summary
    assert summary["steps"] == 2
    assert summary["nll_first_steps"] == pytest.approx(np_flow(start, vectors[order[:64]])[2].mean(), rel=1e-9)
    assert summary["nll_last_steps"] == pytest.approx(np_flow(start, vectors[order[64:128]])[2].mean(), rel=1e-9)


def test_a_new_flow_starts_with_identity_couplings_and_rotations():
    """Glow's start, as BERT-flow draws it: each coupling's last product, bias and scale zero (the
    coupling is the identity), its two inner kernels N(0, 0.05); each LU 1x1 convolution the LU
    decomposition of a rotation (W W^T = I, log-determinant 0)."""
    flow = Flow(64, {"permutation": False, "n_levels": 1, "depth": 2, "coupling_width": 64})
    x = sample(rows=8, dim=64)
    for _, conv, coupling in flow.levels[0]:
        for zero in (coupling.out_kernel, coupling.out_bias, coupling.out_logs):
            assert not zero.numpy().any()
        np.testing.assert_array_equal(coupling(x)[0].numpy(), x)
        inner = np.concatenate([kernel.numpy().ravel() for kernel in coupling.kernels])  # 6144 draws
        assert abs(inner.mean()) < 0.003 and inner.std() == pytest.approx(0.05, rel=0.05)
        w = conv.matrix().numpy()
        np.testing.assert_allclose(w @ w.T, np.eye(64), atol=1e-10)
        assert abs(conv.log_s.numpy().sum()) < 1e-10


def test_a_flow_is_not_trained_in_a_process_that_promises_frozen_weights(monkeypatch):
    from bert_whitening.errors import FlowError
    from bert_whitening.names import FROZEN_WEIGHTS_VARIABLE

    monkeypatch.setenv(FROZEN_WEIGHTS_VARIABLE, "1")
    with pytest.raises(FlowError, match="promises oneDNN that weights never change, and training a flow changes"):
        fit_flow(np.random.default_rng(0).normal(size=(64, 8)), epochs=1)
