"""Options that can only be wrong are refused when parsed (argparse's status 2, one line naming
the option and the value), or, for ``--n-components`` above the model's hidden size, once the
model's configuration is read and before any sentence is."""

import pytest

from helpers import here, refused


@pytest.mark.parametrize(
    "argv, option, value, requirement",
    [
        (["fit", "--method", "flow", "--seed", "-1"], "--seed", "-1", "an integer >= 0"),
        (["eval", "--task", "T", "--method", "flow", "--flow-seeds", "0,-3"], "--flow-seeds", "0,-3", ">= 0"),
        (["index", "--hnsw", "513"], "--hnsw", "513", "0 (exact) or an integer 2..512"),
        (["index", "--hnsw", "-1"], "--hnsw", "-1", "0 (exact) or an integer 2..512"),
        (["index", "--hnsw", "1"], "--hnsw", "1", "0 (exact) or an integer 2..512"),  # FAISS crashes on M 1
        (["index", "--hnsw-m", "600"], "--hnsw-m", "600", "0 (exact) or an integer 2..512"),  # eval-retrieval's name
        (["eval-retrieval", "--task", "T", "--hnsw-m", "100000"], "--hnsw-m", "100000", "an integer 2..512"),
        (["eval-retrieval", "--task", "T", "--hnsw-m", "0"], "--hnsw-m", "0", "an integer 2..512"),
        (["export", "--version", str(2**63)], "--version", str(2**63), "an integer 0..2**63-1"),
        (["export", "--version", "-1"], "--version", "-1", "an integer 0..2**63-1"),
    ],
)
def test_options_that_can_only_be_wrong_are_refused_when_parsed(tmp_path, argv, option, value, requirement):
    outputs = {"fit": ["--output", tmp_path / "w.npz", "in.txt"], "index": ["--output", tmp_path / "i", "in.txt"]}
    outputs["export"] = ["--output", tmp_path / "served"]
    result = here(*argv, *outputs.get(argv[0], []))
    refused(result, option, repr(value), requirement, status=2)
    assert list(tmp_path.iterdir()) == []


def test_the_largest_int64_version_is_accepted_when_parsed():
    from bert_whitening.cli import build_parser

    args = build_parser().parse_args(["export", "--output", "x", "--version", str(2**63 - 1)])
    assert args.version == 2**63 - 1


@pytest.mark.parametrize("command", ["fit", "beam-fit", "eval", "eval-retrieval"])
def test_n_components_above_the_hidden_size_is_refused_before_any_sentence_is_read(tiny_model, tmp_path, command):
    """The input's first line is not UTF-8 and the task has no files: reading either would be
    the error, so the refusal came before any sentence was read."""
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\n")
    argv = {
        "fit": ["fit", "--output", tmp_path / "w.npz", bad],
        "beam-fit": ["beam-fit", "--output", tmp_path / "w.npz", "--input", bad],
        "eval": ["eval", "--task", "NOTHING", "--data-dir", tmp_path],
        "eval-retrieval": ["eval-retrieval", "--task", "NOTHING", "--data-dir", tmp_path],
    }[command]
    result = here(*argv, "--model", tiny_model[0], "--n-components", "25")
    refused(result, "n_components 25 is larger than the model's hidden size 24 (tiny_bert)")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.txt"]
