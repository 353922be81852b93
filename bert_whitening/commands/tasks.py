"""What ``eval`` and ``eval-retrieval`` share: their options (pair tasks, settings, reports), the
files the tasks name, and the steps before and after their work."""

from bert_whitening.commands.base import encoder_config, start
from bert_whitening.commands.options import finite_float_list, int_list, model_options
from bert_whitening.data import TASKS, ReadOptions, task_files
from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import DEFAULT_POOLING

TASK_INPUTS = ("model", "fit_on")


def task_options(parser, n_components_default, plot_help):
    """The options of the commands that evaluate on pair tasks (``eval``, ``eval-retrieval``)."""
    model_options(parser, DEFAULT_POOLING, maxlen_default=None, poolings=True)
    parser.add_argument(
        "--task",
        action="append",
        required=True,
        metavar="TASK",
        help="senteval_cn task (%s), STS-B-en, or a pair file of yours (scored as a test split); "
        "repeat for several" % ", ".join(TASKS),
    )
    parser.add_argument(
        "--n-components",
        default=n_components_default,
        type=int_list,
        help="comma-separated settings: 0 = raw, negative = all, k",
    )
    parser.add_argument(
        "--beta", default="1", type=finite_float_list, help="comma-separated betas (Sigma_beta: see fit --beta)"
    )
    parser.add_argument("--gamma", default="1", type=finite_float_list, help="comma-separated gammas (see fit --gamma)")
    parser.add_argument(
        "--fit-on",
        nargs="+",
        default=["all"],
        metavar="all|train|FILE",
        help="what the whitening is fitted on: all splits of the task, its train split, or sentence/pair files",
    )
    parser.add_argument(
        "--data-dir", help="senteval_cn directory (default: $BERT_WHITENING_DATA, else data/senteval_cn)"
    )
    parser.add_argument(
        "--skip-bad-lines", action="store_true", help="skip malformed data lines with a warning instead of stopping"
    )
    parser.add_argument("--json", metavar="OUT.json", help="write every figure and setting")
    parser.add_argument("--plot", metavar="OUT.png", help=plot_help)


def files_of_tasks(args):
    """The pair files the ``--task`` options name (`Paths.derived`: inputs no output may be)."""
    return task_files(args.data_dir, args.task)


def task_config(args):
    """What ``eval`` and ``eval-retrieval`` share before their work: the encoder checked (the
    outputs were, by `check_paths`), then the precision set."""
    if args.plot and len(args.poolings) > 1:
        raise BertWhiteningError("--plot draws one pooling: give one --pooling, or leave --plot out")
    config = encoder_config(args)
    start(args)
    return config


def write_reports(args, reports, draw):
    """``--json`` (and ``--plot``, drawn by ``draw``) of one pooling's report as ever; several
    poolings' as ``{"poolings": [report, ...]}`` (their plot is refused before any work). Each
    report records the precision its vectors were computed in."""
    from bert_whitening.evaluation import write_report
    from bert_whitening.precision import process_precision

    for report in reports:
        report["precision"] = process_precision()

    if len(reports) > 1:
        write_report({"poolings": reports}, args.json)
    else:
        write_report(reports[0], args.json, args.plot, draw)


def task_read(args):
    """How ``eval`` and ``eval-retrieval`` read the task files, ``--fit-on`` files and
    distractors: each file's format detected."""
    return ReadOptions(skip_bad_lines=args.skip_bad_lines, batch_size=args.batch_size)


def fit_on(args):
    return args.fit_on[0] if args.fit_on in (["all"], ["train"]) else args.fit_on


def eval_options(args, **more):
    """The `EvalOptions` of ``eval`` and ``eval-retrieval`` (`task_options`), with ``more`` of
    the command's own."""
    from bert_whitening.evaluation import EvalOptions

    return EvalOptions(
        n_components=args.n_components,
        betas=args.beta,
        gammas=args.gamma,
        fit_on=fit_on(args),
        directory=args.data_dir,
        read=task_read(args),
        poolings=args.poolings,
        **more,
    )
