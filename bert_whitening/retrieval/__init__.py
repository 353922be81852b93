"""Retrieval: a benchmark of pair tasks, FAISS indexes, index directories and search.

- `benchmark`: the retrieval benchmark of a pair task and its metrics (numpy);
- `faiss_indexes`: FAISS exact and HNSW indexes, their sizes and timings;
- `index_directory`: the self-contained, verified index directory format;
- `search`: ``index`` and ``search`` with an encoder, and ``export --corpus``'s corpus;
- `evaluate`: ``eval-retrieval``.
"""
