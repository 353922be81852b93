"""``search``: the nearest corpus lines of queries in an index directory."""

import itertools
import os

from bert_whitening.commands.base import Command, Paths
from bert_whitening.commands.options import positive_int
from bert_whitening.data import STDIN, chunked, display_name, read_sentences
from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import POOLINGS


def add_arguments(parser):
    parser.add_argument("--index", required=True, metavar="DIR", help="directory from `index`")
    parser.add_argument("--top-k", type=positive_int, default=10, help="lines per query")
    parser.add_argument("--queries", metavar="FILE", help="file of queries, one per line")
    parser.add_argument(
        "--model", metavar="DIR", help="the index's model directory where it has moved (default: recorded)"
    )
    parser.add_argument("--pooling", choices=POOLINGS, help="must equal the index's")
    parser.add_argument(
        "--whitening", metavar="FILE.npz", help="the index's whitening file where it has moved (default: recorded)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=128, help="queries per model call")
    parser.add_argument(  # not --json, which names a file another command writes
        "--format", choices=("text", "json"), default="text", help="what is printed: lines of text, or one JSON list"
    )
    parser.add_argument("query", nargs="*", metavar="QUERY", help="query sentences")


def run_search(args):
    import json
    import textwrap

    from bert_whitening.retrieval.search import format_hits, search_queries, searched

    if args.queries and args.queries != STDIN and os.path.isfile(args.queries):
        for query_list in _query_lists(args):  # read again below: every line is checked before the index is opened
            search_queries(*query_list)
    query_lists = _query_lists(args)
    first = next(query_lists, None)
    if first is None:
        raise BertWhiteningError(
            "%s: no queries in it" % display_name(args.queries)
            if args.queries
            else "no queries: give QUERY arguments or --queries FILE"
        )
    results = searched(
        args.index,
        itertools.chain([first], query_lists),
        args.top_k,
        args.model,
        args.pooling,
        args.whitening,
        args.batch_size,
    )
    if args.format == "text":
        for found in results:
            print(format_hits(found))
        return
    # json.dumps of every result at once, indent 2, written a result at a time
    separator = "[\n"
    for found in results:
        for result in found:
            print(separator + textwrap.indent(json.dumps(result, indent=2, ensure_ascii=False), "  "), end="")
            separator = ",\n"
    print("\n]")


def _query_lists(args):
    """``(queries, labels)`` of the QUERY arguments, then of the lines of ``--queries``,
    `QUERIES_AT_ONCE` at a time, read as they are asked for; each label names where its query
    came from, for `search_queries`' refusal of an empty one."""
    from bert_whitening.retrieval.search import QUERIES_AT_ONCE

    numbered = (("QUERY %d is empty" % number, query) for number, query in enumerate(args.query, 1))
    if args.queries:
        name = display_name(args.queries)
        lines = read_sentences(args.queries, "lines")
        numbered = itertools.chain(
            numbered, (("%s:%d: an empty query" % (name, number), query) for number, query in enumerate(lines, 1))
        )
    for chunk in chunked(numbered, QUERIES_AT_ONCE):
        labels, queries = zip(*chunk, strict=True)
        yield list(queries), list(labels)


COMMAND = Command(
    name="search",
    help="nearest corpus lines of queries in an index",
    description="Encode the queries with the encoder the index records (model, pooling, "
    "whitening, k) and print the nearest lines with their cosine. A --model, "
    "--pooling or --whitening other than the index's is refused.",
    add_arguments=add_arguments,
    run=run_search,
    paths=Paths({}, ("index", "queries", "model", "whitening"), prints=True),
    weights_read_only=False,
)
