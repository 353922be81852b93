"""`build_index`, `search` and `searched` called from Python on the tiny checkpoint."""

import os

import pytest

from bert_whitening.retrieval import search as search_module

from helpers import MANY


def test_build_index_refuses_vectors_not_normalised_nothing_to_index_and_an_m_not_an_int(indexed, tmp_path):
    from bert_whitening.config import EncoderConfig

    model = indexed[0]
    with pytest.raises(ValueError, match="^an index holds L2-normalised vectors: --no-normalize cannot be used$"):
        search_module.build_index(
            EncoderConfig(model=model, normalize=False), str(tmp_path / "index"), inputs=[str(indexed[1])]
        )
    with pytest.raises(ValueError, match="^nothing to index: give sentence files, --from-vectors or --from-beam$"):
        search_module.build_index(EncoderConfig(model=model, normalize=True), str(tmp_path / "index"))
    for m in (None, False, 0.0):  # an exact index is hnsw_m 0, the integer
        with pytest.raises(ValueError, match=r"^hnsw_m must be 0 \(exact\) or an integer 2\.\.512, got %r$" % m):
            search_module.build_index(
                EncoderConfig(model=model, normalize=True), str(tmp_path / "i"), search_module.IndexOptions(hnsw_m=m)
            )
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("other", ["inputs", "from_vectors"])
def test_sentences_given_to_build_index_are_indexed_alone(indexed, tmp_path, other):
    """Given with files or vectors, the files or vectors were ignored without a word."""
    from bert_whitening.config import EncoderConfig

    model, corpus, _, vectors, _ = indexed
    sources = {"inputs": [str(corpus)]} if other == "inputs" else {"from_vectors": str(vectors)}
    with pytest.raises(ValueError, match="^sentences are indexed alone: give them without inputs, from_vectors"):
        search_module.build_index(
            EncoderConfig(model=model, normalize=True), str(tmp_path / "index"), sentences=["a", "b"], **sources
        )
    assert not (tmp_path / "index").exists()


def test_the_python_searches_refuse_an_empty_query_too(indexed):
    """Only the command line refused a blank query; the API searched the empty sentence."""
    from bert_whitening import SentenceEncoder
    from bert_whitening.retrieval.search import search

    model, corpus, whitening, vectors, index = indexed
    with pytest.raises(ValueError, match=r"^queries\[1\] is empty: nothing to search for$"):
        search(index, ["fine", " "])
    in_memory = SentenceEncoder.load(model).index(["今天天气很好", "我们在北京"])
    with pytest.raises(ValueError, match=r"^queries\[0\] is empty: nothing to search for$"):
        in_memory.search([""])


def test_searched_reads_a_list_of_queries_once_the_hits_before_it_are_out(indexed):
    from bert_whitening.retrieval.search import searched

    pulled = []

    def query_lists():
        for number in range(3):
            pulled.append(number)
            yield MANY[number : number + 2], None

    results = searched(str(indexed[-1]), query_lists(), top_k=1)
    for number, found in enumerate(results):
        assert pulled == list(range(number + 1))
        assert [result["hits"][0]["text"] for result in found] == MANY[number : number + 2]
