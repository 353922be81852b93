"""``eval-retrieval``: MRR@10 and Recall@k of cosine search on a pair task's split."""

import functools

from bert_whitening.commands.base import Command, Paths
from bert_whitening.commands.options import codes_option, hnsw_m_int
from bert_whitening.commands.tasks import (
    TASK_INPUTS,
    eval_options,
    files_of_tasks,
    task_config,
    task_options,
    write_reports,
)
from bert_whitening.io.atomic import FILE
from bert_whitening.retrieval.faiss_indexes import HNSW_M


def add_arguments(parser):
    task_options(parser, "0,-1,256,128,64", "plot quality and latency against k (one pooling)")
    parser.add_argument("--split", default="test", help="split the benchmark is made from")
    parser.add_argument(
        "--distractors", nargs="+", default=[], metavar="FILE", help="sentence files added to every task's corpus"
    )
    parser.add_argument(
        "--hnsw-m",
        type=hnsw_m_int,
        default=HNSW_M,
        help="neighbours per node of the HNSW index compared with exact search",
    )
    codes_option(
        parser,
        "comma-separated codes each setting is scored in, e.g. float32,int8,binary: float32 by exact cosine "
        "(with FAISS sizes and timings), int8 and binary ranked by the cosine of their codes; each row says "
        "its codes and the bytes a vector takes",
        many=True,
        default=("float32",),
    )


def run_eval_retrieval(args):
    from bert_whitening.plots import plot_retrieval
    from bert_whitening.retrieval.evaluate import RetrievalOptions, evaluate_retrieval, format_retrieval_table

    options = eval_options(args)
    retrieval = RetrievalOptions(
        split=args.split, distractor_files=args.distractors, hnsw_m=args.hnsw_m, codes=args.codes
    )
    config = task_config(args)
    show = lambda title, entry: print(format_retrieval_table(title, entry), flush=True)
    reports = evaluate_retrieval(config, args.task, options, retrieval, on_task=show)
    write_reports(args, reports, functools.partial(plot_retrieval, reports[0]))


COMMAND = Command(
    name="eval-retrieval",
    help="MRR@10 and Recall@k of cosine search, index size and query latency per k",
    description="Make a retrieval benchmark from a pair task's split: queries are the "
    "distinct first sentences of positive pairs (label 1 on 0/1 tasks, score >= 4 "
    "on 0-5 STS tasks), the corpus the distinct second sentences of all pairs "
    "(plus --distractors), the relevant items of a query the second sentences "
    "of its positive pairs. Each distinct sentence of a task is encoded once; for "
    "every setting it reports MRR@10, Recall@1 and Recall@10 of exact cosine search, the FAISS "
    "IndexFlatIP size and latency (p50/p99 of one query, queries/s in batches "
    "of 64) and an HNSW index's Recall@10 against exact search; with --codes, the same metrics of "
    "int8 and binary codes ranked by their cosine, and the bytes a vector takes in each. Needs "
    "`pip install bert-whitening[search]`.",
    add_arguments=add_arguments,
    run=run_eval_retrieval,
    paths=Paths({"json": FILE, "plot": FILE}, TASK_INPUTS + ("distractors",), derived=(files_of_tasks,), prints=True),
    weights_read_only=True,
)
