"""What several test files use: the tiny model's vocabulary, configuration and random weights,
the command line in-process, and the shared evaluation data."""

import contextlib
import dataclasses
import importlib.util
import io
import itertools
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

TINY_VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list("今天气很好我们你他她是的不在有一个人中国北京上海爱喝茶咖啡猫狗跑吃饭学习工作。，！？")
    + [
        "the",
        "a",
        "cat",
        "dog",
        "is",
        "on",
        "mat",
        "run",
        "##s",
        "##ing",
        "hello",
        "world",
        "good",
        "bad",
        "weather",
        "today",
        ",",
        ".",
        "!",
        "?",
        "我们",
        "北京",
    ]
)

TINY_CONFIG = {
    "vocab_size": len(TINY_VOCAB),
    "hidden_size": 24,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "hidden_act": "gelu",
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}

SENTENCES = [
    "今天天气很好",
    "我们在北京",
    "你爱喝茶还是咖啡？",
    "他在上海工作",
    "猫和狗在跑",
    "the cat is on the mat",
    "hello world!",
    "good weather today",
    "the dogs are running",
    "中国人爱喝茶",
    "我不在学习",
    "",
    "a",
    "她是一个好人。",
    "吃饭了吗",
    "the cat runs, the dog runs.",
]

#: Texts where tokenizers are easy to get wrong: marks, controls, spaces of every kind, long words.
EDGE_CASES = SENTENCES + [
    "Ünïcödé ÀÉÎ café naïve",
    "tab\there\x0bvt\x0cff\u2028ls\u2029ps  \u3000wide space",
    "zero\x00width\u200bjoin\ufeffbom\ufffd",
    "İstanbul ǅ ß ﬁ",
    "x" * 250,
    "a" * 201 + " ok",
    "hello$world+1<2=3>^`|~",
    "全角，标点！＂＃",
    "emoji 😀👍 ok",
    "   ",
    "mixed中文english混合123",
    "今天天气很好" * 30,
    "THE CAT Is On The MAT",
]


ROOT = os.path.join(os.path.dirname(__file__), "..")
SHARED = os.path.join(ROOT, "..", "shared", "data")


def shared_data(*parts):
    """A path under ../shared/data; the test is skipped where that is not beside the checkout,
    and fails in CI, where it must be."""
    if not os.path.isdir(SHARED):
        if os.environ.get("CI"):
            pytest.fail("../shared/data must lie beside the checkout in CI")
        pytest.skip("../shared/data is not beside this checkout")
    return os.path.join(SHARED, *parts)


def shared_sentences():
    """Every distinct sentence of the senteval_cn tasks and the English STS benchmark."""
    from bert_whitening.data import ENGLISH_STS, distinct_sentences, load_task

    directory = shared_data("senteval_cn")
    tasks = sorted(os.listdir(directory)) + [ENGLISH_STS]
    return distinct_sentences(
        {(task, split): pairs for task in tasks for split, pairs in load_task(task, directory).items()}
    )


def original_eval_script():
    """``eval/eval.py`` (the original command line) as a module, to call its ``main`` in this
    process; tests/test_evaluation.py runs it as a command too."""
    spec = importlib.util.spec_from_file_location("original_eval_script", os.path.join(ROOT, "eval", "eval.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMANDS_IN_A_FRESH_PROCESS = """
import json, sys
from bert_whitening.cli import main
%s
print(json.dumps([[main(argv) for argv in json.loads(sys.argv[1])], "tensorflow" in sys.modules]))
"""


LAUNCHER = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
for descriptor in filter(None, sys.argv[1].split(",")):
    os.close(int(descriptor))
os.execv(sys.executable, [sys.executable] + sys.argv[2:])
"""


def launched(argv, close=()):
    """The command line that runs ``python ARGV`` with SIGINT at its default (a runner started in
    the background, ``cmd &`` without job control, ignores SIGINT and children inherit that) and
    the descriptors ``close`` closed. A small Python does this before exec: a ``preexec_fn`` in
    this process, which has imported TensorFlow, would make the child a fork that runs TensorFlow's
    pthread_atfork handlers, whose restarted gRPC poller can abort it before exec."""
    return [sys.executable, "-c", LAUNCHER, ",".join(str(d) for d in close), *[str(a) for a in argv]]


def commands_in_a_fresh_process(commands, prelude=""):
    """``(exit statuses, whether TensorFlow was imported, standard error)`` of ``bert-whitening``
    commands run one after another by `cli.main` in a new Python process, after the code
    ``prelude`` (to stub what a command would start, say)."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            COMMANDS_IN_A_FRESH_PROCESS % prelude,
            json.dumps([[str(a) for a in c] for c in commands]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    statuses, imported = json.loads(result.stdout.splitlines()[-1])
    return statuses, imported, result.stderr


def here(*argv):
    """``bert-whitening ARGV`` in this process, as `cli` gives it: the exit status and what a
    terminal would show on standard error (argparse's lines and the log at ``--log-level``,
    INFO by default). For the cases that need no process of their own: refusals are decided
    without TensorFlow, so they cost little here and nothing is left behind."""
    from bert_whitening import cli as command

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger()
    level = argv[argv.index("--log-level") + 1] if "--log-level" in argv else "INFO"
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        with contextlib.redirect_stderr(stream):
            try:
                status = command.main([str(a) for a in argv])
            except SystemExit as exit:
                status = exit.code
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
    return subprocess.CompletedProcess(argv, status, b"", stream.getvalue().encode("utf-8"))


def refused(result, *fragments, status=1):
    """The run failed with ``status`` and one error line holding every fragment, no traceback."""
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == status, stderr
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith(("ERROR:", "usage:", "bert-whitening"))]
    message = " ".join(errors)
    for fragment in fragments:
        assert fragment in message, stderr
    return message


def run(*argv):
    """``bert-whitening ARGV`` in this process; its exit status."""
    from bert_whitening import cli

    return cli.main([str(a) for a in argv])


def limit_memory_in(monkeypatch, module, limit):
    """``module``'s memory checks (`bert_whitening.io.bounded.check_memory`, as it imported it) held
    to the `MemoryLimit` ``limit``, the others to the process's: a small corpus's needs are
    far below a model's, which the same limit would refuse first."""
    from bert_whitening.io import bounded

    def check_memory(*arguments, **options):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(bounded, "usable_memory", lambda: limit)
            return bounded.check_memory(*arguments, **options)

    monkeypatch.setattr(module, "check_memory", check_memory)


def assert_equals_numpy_bert(encoder, vectors, params, pooling):
    """``encoder``'s ``vectors`` of SENTENCES, in order, each against the numpy BERT of
    tests/reference.py for its unpadded token ids."""
    from reference import pooled_reference

    for sentence, vector in zip(SENTENCES, vectors, strict=True):
        ids = encoder.tokenizer.encode(sentence, maxlen=encoder.maxlen)[0]
        expected = pooled_reference(params, TINY_CONFIG, ids, pooling)
        np.testing.assert_allclose(vector, expected, atol=1e-5, err_msg="%s: %s" % (pooling, sentence))


def relative_error(actual, expected):
    return np.abs(actual - expected).max() / np.abs(expected).max()


def random_weights(config, seed=0, with_pooler=True, scale=0.3):
    """Random weights of a BERT of ``config`` under google-research/bert names.

    For tests and the offline demo: a model that loads and runs like a real one, with no
    download. Its vectors carry no meaning.
    """
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    normal = lambda *shape: rng.normal(0.0, scale, shape).astype(np.float32)
    weights = {
        "bert/embeddings/word_embeddings": normal(config["vocab_size"], hidden),
        "bert/embeddings/token_type_embeddings": normal(config["type_vocab_size"], hidden),
        "bert/embeddings/position_embeddings": normal(config["max_position_embeddings"], hidden),
        "bert/embeddings/LayerNorm/gamma": 1 + normal(hidden),
        "bert/embeddings/LayerNorm/beta": normal(hidden),
    }
    shapes = {
        "attention/self/query": (hidden, hidden),
        "attention/self/key": (hidden, hidden),
        "attention/self/value": (hidden, hidden),
        "attention/output/dense": (hidden, hidden),
        "intermediate/dense": (hidden, inner),
        "output/dense": (inner, hidden),
    }
    for layer in range(config["num_hidden_layers"]):
        prefix = "bert/encoder/layer_%d/" % layer
        for name, shape in shapes.items():
            weights[prefix + name + "/kernel"] = normal(*shape)
            weights[prefix + name + "/bias"] = normal(shape[1])
        for name in ("attention/output/LayerNorm", "output/LayerNorm"):
            weights[prefix + name + "/gamma"] = 1 + normal(hidden)
            weights[prefix + name + "/beta"] = normal(hidden)
    if with_pooler:
        weights["bert/pooler/dense/kernel"] = normal(hidden, hidden)
        weights["bert/pooler/dense/bias"] = normal(hidden)
    return weights


def synthetic_pairs(count, seed=0):
    """Pairs over the tiny vocabulary: a random sentence and a copy with m random token edits,
    labelled 5 - m. Every sentence distinct, so there are no cosine ties to break by noise."""
    rng = np.random.default_rng(seed)
    words = [t for t in TINY_VOCAB[5:] if not t.startswith("##")]
    pairs, seen = [], set()
    while len(pairs) < count:
        first = list(rng.choice(words, size=rng.integers(4, 14)))
        edits = int(rng.integers(0, 6))
        second = list(first)
        for position in rng.choice(len(second), size=min(edits, len(second)), replace=False):
            second[position] = rng.choice(words)
        a, b = " ".join(first), " ".join(second)
        if a != b and a not in seen and b not in seen:
            seen.update((a, b))
            pairs.append((a, b, 5 - edits))
    return pairs


# Fine-tuning (tests/training/): pair files, and `bert_whitening.training.train` on the tiny model.


def write_pairs(path, rows):
    with open(path, "w", encoding="utf-8") as stream:
        stream.writelines("%s\t%s\t%s\n" % row for row in rows)
    return str(path)


def random_pairs(seed, count=24, labels=(0, 1, 2, 3, 4, 5)):
    rng = np.random.default_rng(seed)
    return [
        (SENTENCES[rng.integers(len(SENTENCES))], SENTENCES[rng.integers(len(SENTENCES))], rng.choice(labels))
        for _ in range(count)
    ]


def bad(tmp_path, name, rows):
    return write_pairs(tmp_path / name, rows)


def run_training(train_file, output, valid_file=None, *, report=None, progress=None, **options):
    """`training.train` of the `TrainOptions` the files and ``options`` make."""
    from bert_whitening import training

    options = training.TrainOptions(train_file, output, valid_file, **options)
    return training.train(options, report=report, progress=progress)


def quick(tiny_model, pair_files, output, **options):
    """`training.train` on the tiny model with a learning rate that moves its weights in a few steps."""
    options = {"learning_rate": 1e-3, "epochs": 2, "batch_size": 8, "report": lambda line: None, **options}
    return run_training(pair_files[0], str(output), model=tiny_model[0], **options)


def checkpoint(directory):
    """The weights of a Google-format model directory, by name."""
    from bert_whitening.backend import tf

    reader = tf.train.load_checkpoint(os.path.join(directory, "bert_model.ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def state_directory(output):
    """Where a run with ``resume`` training into ``output`` keeps its state."""
    from bert_whitening.training import RESUME_SUFFIX

    return output.parent / (".%s%s" % (output.name, RESUME_SUFFIX))


def with_run(name, work):
    """The registered commands (`bert_whitening.commands.COMMANDS`) with the one called ``name``
    doing ``work(args)`` instead of its own run, its parsing and checks kept: for
    ``monkeypatch.setattr(commands, "COMMANDS", with_run(...))``."""
    from bert_whitening import commands

    assert name in [command.name for command in commands.COMMANDS], name
    return tuple(
        dataclasses.replace(command, run=work) if command.name == name else command for command in commands.COMMANDS
    )


WORDS = ["今天", "天气", "很好", "我们", "在北京", "喝茶", "the cat", "is on", "the mat", "hello"]


MANY = ["".join(parts) for parts in itertools.permutations(WORDS, 3)][::7][:80]  # 80 sentences


def one_error(caplog):
    """The one line a refused command logged."""
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    return errors[0]


def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


#: An encoder record as `EncoderConfig.to_config` writes it (the tests of this file need no model).
RECORD = {
    "model": {
        "name": "m",
        "format": "google",
        "type": "bert",
        "hidden_size": 6,
        "num_hidden_layers": 1,
        "vocab_sha256": "0" * 64,
    },
    "model_dir": None,
    "pooling": "cls",
    "maxlen": 16,
    "lowercase": True,
    "whitening": None,
    "n_components": 0,
    "normalize": True,
    "allow_rank_deficient": False,
}


def hf_tensors(config, seed=1, prefix=""):
    """Random BertModel tensors under transformers' names, Linear weights ``(out, in)``."""
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    normal = lambda *shape: rng.normal(0.0, 0.3, shape).astype(np.float32)
    tensors = {
        "embeddings.word_embeddings.weight": normal(config["vocab_size"], hidden),
        "embeddings.position_embeddings.weight": normal(config["max_position_embeddings"], hidden),
        "embeddings.token_type_embeddings.weight": normal(config["type_vocab_size"], hidden),
        "embeddings.LayerNorm.weight": 1 + normal(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
        "embeddings.position_ids": np.arange(config["max_position_embeddings"])[None],
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": normal(hidden),
    }
    linear = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "intermediate.dense": (inner, hidden),
        "output.dense": (hidden, inner),
    }
    for layer in range(config["num_hidden_layers"]):
        for name, (out, into) in linear.items():
            tensors["encoder.layer.%d.%s.weight" % (layer, name)] = normal(out, into)
            tensors["encoder.layer.%d.%s.bias" % (layer, name)] = normal(out)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors["encoder.layer.%d.%s.weight" % (layer, name)] = 1 + normal(hidden)
            tensors["encoder.layer.%d.%s.bias" % (layer, name)] = normal(hidden)
    tensors = {prefix + name: value for name, value in tensors.items()}
    if prefix:  # a BertForMaskedLM-style file also carries heads, which are not used
        tensors["cls.predictions.bias"] = normal(config["vocab_size"])
    return tensors


def write_hf(directory, tensors, config=TINY_CONFIG, model_type="bert"):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as stream:
        json.dump({"architectures": ["BertModel"], "layer_norm_eps": 1e-12, **config, "model_type": model_type}, stream)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as stream:
        stream.write("".join(token + "\n" for token in TINY_VOCAB))
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    return directory


LINES = SENTENCES + ["%s %s" % (SENTENCES[i], SENTENCES[-1 - i]) for i in range(14)]


def write_corpus(directory):
    """Two sentence files (one without a final newline, one with an empty line) and a pair file."""
    directory.mkdir()
    (directory / "a.txt").write_text("\n".join(LINES[:17]), encoding="utf-8")  # LINES[11] is ""
    (directory / "b.txt").write_text("\n".join(LINES[17:]) + "\n", encoding="utf-8")
    pairs = ["%s\t%s\t%d" % (LINES[i], LINES[-1 - i], i % 2) for i in range(6)]
    (directory / "c.data").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    return directory
