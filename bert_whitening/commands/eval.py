"""``eval``: Spearman of cosine similarity on pair tasks, for every setting asked for."""

import functools

from bert_whitening.commands.base import Command, Paths
from bert_whitening.commands.options import (
    codes_option,
    flow_training,
    flow_training_options,
    method_list,
    seed_list,
)
from bert_whitening.commands.tasks import (
    TASK_INPUTS,
    eval_options,
    files_of_tasks,
    task_config,
    task_options,
    write_reports,
)
from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.atomic import FILE


def add_arguments(parser):
    task_options(parser, "0,-1,256", "plot Spearman against n_components and the eigenvalue spectrum (one pooling)")
    parser.add_argument(
        "--method",
        default="whitening",
        type=method_list,
        help="comma-separated: whitening (n_components, beta, gamma as given) and/or "
        "flow (a BERT-flow, Glow as bohanli/BERT-flow trains it, fitted on the "
        "same vectors, scored on the same encoding)",
    )
    parser.add_argument(
        "--flow-seeds",
        default=None,
        type=seed_list,
        help="comma-separated seeds, one flow each (with --method flow; default 0)",
    )
    codes_option(
        parser,
        "comma-separated codes every setting's unit vectors are scored in (float32, int8, binary: "
        "cosine of the codes); with another than float32, the best setting within each byte budget "
        "is printed too, chosen on the valid split",
        many=True,
        default="float32",
    )
    flow_training_options(parser)


def run_eval(args):
    from bert_whitening.evaluation import evaluate_tasks, format_budgets, format_table
    from bert_whitening.plots import plot_report

    training = flow_training(args, "flow" in args.method)
    if args.flow_seeds is not None and "flow" not in args.method:
        raise BertWhiteningError("--flow-seeds are the flows' seeds: add --method whitening,flow (or flow)")
    options = eval_options(
        args, methods=args.method, flow_seeds=args.flow_seeds or [0], flow_options=training, codes=args.codes
    )
    config = task_config(args)

    def show(title, task, report):
        if title != task:  # several poolings
            print(title)
        print(format_table(task, report), flush=True)
        budgets = format_budgets(task, report)
        if budgets:
            print(budgets, flush=True)

    results = evaluate_tasks(config, args.task, options, on_task=show)
    write_reports(args, [report for report, _ in results], functools.partial(plot_report, *results[0]))


COMMAND = Command(
    name="eval",
    help="Spearman of cosine similarity on STS tasks",
    description="Encode every split of each task once, fit the whitening (default: on all "
    "splits, as the original eval.py), and report the Spearman correlation of "
    "cosine with the gold labels per split, with the plain and size-weighted "
    "averages, for every requested setting. --maxlen defaults to the original's "
    "choice: 128 for PAWSX, 64 otherwise.",
    add_arguments=add_arguments,
    run=run_eval,
    paths=Paths({"json": FILE, "plot": FILE}, TASK_INPUTS, derived=(files_of_tasks,), prints=True),
    weights_read_only=True,
)
