"""`evaluate_retrieval`'s options and its table."""

import pytest

from bert_whitening.errors import BertWhiteningError


def test_the_retrieval_table_shows_each_figure_in_its_column():
    from bert_whitening.retrieval.evaluate import format_retrieval_table

    flat = {"index_bytes": 2_500_000, "p50_ms": 0.25, "p99_ms": 1.5, "qps_batch64": 12345.6}
    hnsw = {"recall@10_vs_exact": 0.875, "p50_ms": 0.125}
    result = {"setting": "whiten-8", "dim": 8, "mrr@10": 0.5, "recall@1": 0.25, "recall@10": 0.75}
    entry = {
        "counts": {"queries": 3, "corpus": 20, "distractors": 5, "relevant": 4},
        "results": [
            dict(result, codes="float32", bytes=32, flat=flat, hnsw=hnsw),
            dict(result, codes="binary", bytes=1, **{"mrr@10": 0.375}),
        ],
    }
    header, columns, row, coded = format_retrieval_table("T", entry).splitlines()
    assert header == "T: 3 queries, corpus 20 (5 distractors), 4 relevant pairs"
    assert (
        columns.split()
        == "setting dim codes bytes MRR@10 R@1 R@10 index MB p50 ms p99 ms q/s@64 HNSW R@10 HNSW p50".split()
    )
    assert coded.split() == ["whiten-8", "8", "binary", "1", "0.3750", "0.2500", "0.7500"] + ["-"] * 6
    assert row.split() == [
        "whiten-8",
        "8",
        "float32",
        "32",
        "0.5000",
        "0.2500",
        "0.7500",
        "2.50",
        "0.250",
        "1.500",
        "12346",
        "0.8750",
        "0.125",
    ]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"split": 1}, "split must be a str, got int 1"),
        (
            {"distractor_files": "d.txt"},
            "distractor_files must be a list of file paths, got str 'd.txt' (one file: put",
        ),
        ({"distractor_files": [None]}, "distractor_files[0] must be a str, got NoneType None"),
        ({"hnsw_m": 0}, "hnsw_m must be an integer 2..512, got 0"),
        ({"hnsw_m": 16.0}, "hnsw_m must be an integer 2..512, got 16.0"),
        ({"codes": "float32,int4"}, "codes must be one of float32, int8, binary, got 'int4'"),
        ({"codes": ()}, "codes: no code named"),
    ],
)
def test_retrieval_options_refuse_each_value_no_benchmark_can_use_when_built(options, message):
    from bert_whitening.retrieval.evaluate import RetrievalOptions

    with pytest.raises(BertWhiteningError) as raised:
        RetrievalOptions(**options)
    assert str(raised.value).startswith(message)


def test_evaluate_retrieval_refuses_flows_and_options_of_another_kind(monkeypatch):
    """Before any file is read or model built: a benchmark scores whitenings."""
    from bert_whitening.config import EncoderConfig
    from bert_whitening.evaluation import EvalOptions
    from bert_whitening.retrieval import evaluate

    assert evaluate.RetrievalOptions(distractor_files=["d.txt"]).distractor_files == ("d.txt",)
    monkeypatch.setattr(evaluate, "load_tasks", lambda *args: pytest.fail("the tasks were loaded"))
    spec = EncoderConfig("unused")
    refused = [
        (EvalOptions(methods=["whitening", "flow"]), evaluate.RetrievalOptions(), "eval-retrieval scores whitenings"),
        ({"n_components": [0]}, evaluate.RetrievalOptions(), "options must be an EvalOptions, got dict"),
        (EvalOptions(), {"split": "test"}, "retrieval must be a RetrievalOptions, got dict"),
    ]
    for options, retrieval, said in refused:
        with pytest.raises(BertWhiteningError) as raised:
            evaluate.evaluate_retrieval(spec, ["STS-B"], options, retrieval)
        assert str(raised.value).startswith(said)
