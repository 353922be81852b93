"""Spearman correlation between cosine similarity and gold labels, per split and setting.

Each distinct sentence of a task is encoded once (every pooling asked for in the same forward
pass); every requested ``(n_components, beta, gamma)``, and with the method ``"flow"`` a
BERT-flow per seed (`bert_whitening.flow`), is then evaluated on the same vectors, with the
time each fit took. As in the original chn/eval.py, the whitening (and the flow) of a task is
fitted on both sentences of every pair of all its splits (``fit_on="all"``), and each setting
reports the Spearman of every split, their plain average (``avg``) and their average weighted
by split size (``w-avg``). ``fit_on="train"`` or a list of files fits on data held apart from
what is scored.
`evaluate_tasks` is what the ``eval`` command and ``eval/eval.py`` run. Importing this module
imports no TensorFlow; `evaluate_tasks` builds the encoder when it is called, and a flow imports
it when one is fitted.
"""

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import scipy.stats

from bert_whitening.arguments import integer, optional_path, options_of, path_list, value_tuple
from bert_whitening.codes import code_list, quantizer
from bert_whitening.data import (  # noqa: F401  TASKS: named here too
    TASKS,
    ReadOptions,
    check_labels,
    check_readable,
    data_dir,
    distinct_sentences,
    load_task,
    split_file,
    task_files,
)
from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.io.atomic import check_outputs, write_atomically
from bert_whitening.names import METHODS, POOLINGS, check_choice
from bert_whitening.vectors import l2_normalize
from bert_whitening.whitening import FitOptions, Whitening, WhiteningStats, fit_whitening

if TYPE_CHECKING:
    from bert_whitening.config import EncoderConfig

logger = logging.getLogger(__name__)


def task_maxlen(task: str, maxlen: Optional[int] = None) -> int:
    """``maxlen`` if given, else the original's choice: 128 for PAWSX, 64 otherwise."""
    return maxlen or (128 if task == "PAWSX" else 64)


@dataclasses.dataclass
class Setting:
    n_components: int
    beta: float = 1.0
    gamma: float = 1.0
    method: str = "whitening"
    seed: int = 0  #: a flow's; a whitening has no randomness

    @property
    def label(self):
        if self.method == "flow":
            return "flow s=%d" % self.seed
        k = "raw" if self.n_components == 0 else "all" if self.n_components < 0 else self.n_components
        extra = "" if (self.beta, self.gamma) == (1.0, 1.0) else " b=%g g=%g" % (self.beta, self.gamma)
        return "k=%s%s" % (k, extra) if self.n_components else "raw"


def settings(
    n_components: Sequence[int],
    betas: Sequence[float] = (1.0,),
    gammas: Sequence[float] = (1.0,),
    methods: Sequence[str] = ("whitening",),
    seeds: Sequence[int] = (0,),
) -> list[Setting]:
    """Every combination, each a `FitOptions` checked before any task is read; ``n_components``
    0 (no whitening) is evaluated once, whatever beta and gamma, every negative one as -1 (all),
    and the others only when
    ``methods`` has ``"whitening"``; ``"flow"`` adds one flow per seed (its latent keeps every
    dimension)."""
    unknown = [method for method in methods if method not in METHODS]
    if unknown:
        raise BertWhiteningError("unknown method %r (methods: %s)" % (unknown[0], ", ".join(METHODS)))
    found = []
    for k, beta, gamma in itertools.product(n_components, betas, gammas):
        options = FitOptions(k, beta, gamma)
        if options.n_components < 0:  # every negative k is "all": one setting
            options = dataclasses.replace(options, n_components=-1)
        setting = Setting(k) if k == 0 else Setting(options.n_components, options.beta, options.gamma)
        if setting not in found and (k == 0 or "whitening" in methods):
            found.append(setting)
    if "flow" in methods:
        found.extend(Setting(-1, method="flow", seed=seed) for seed in dict.fromkeys(seeds))
    return found


def _as_is(value, name):
    return value


def _pooling(value, name):
    check_choice("pooling", value, POOLINGS)
    return value


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """How ``eval`` and ``eval-retrieval`` evaluate, built and checked once before a task is read
    or a model built, then passed through as it is: the settings (every combination of
    ``n_components``, ``betas`` and ``gammas``, `settings`; raw when ``n_components`` has 0),
    ``fit_on`` (``"all"`` splits of each task, ``"train"``, or a list of sentence/pair files),
    ``directory`` (the senteval_cn directory, `bert_whitening.data.data_dir`), ``read`` (how the
    task, ``fit_on`` and distractor files are read and batched), ``poolings`` (scored on one
    encoding; empty: the encoder's own), and ``eval``'s flows: ``methods`` (``"whitening"``
    and/or ``"flow"``), ``flow_seeds`` (one flow each) and ``flow_options`` (further arguments
    of `bert_whitening.flow.fit_flow`, checked where a flow is fitted, since the flow's checks
    import TensorFlow); ``codes``, what every setting's unit vectors are scored in
    (`bert_whitening.codes.CODES`, `checked_codes`). Lists are kept as tuples."""

    n_components: Sequence[int] = (0, -1, 256)
    betas: Sequence[float] = (1.0,)
    gammas: Sequence[float] = (1.0,)
    fit_on: str | Sequence[str] = "all"
    directory: Optional[str] = None
    read: ReadOptions = ReadOptions()
    poolings: Sequence[str] = ()
    methods: Sequence[str] = ("whitening",)
    flow_seeds: Sequence[int] = (0,)
    flow_options: Optional[dict] = None
    codes: Sequence[str] = ("float32",)

    def __post_init__(self):
        put = functools.partial(object.__setattr__, self)
        put("n_components", value_tuple(self.n_components, "n_components", integer))
        put("betas", value_tuple(self.betas, "betas", _as_is))  # each a FitOptions' below
        put("gammas", value_tuple(self.gammas, "gammas", _as_is))
        put("fit_on", checked_fit_on(self.fit_on))
        put("directory", optional_path(self.directory, "directory"))
        options_of(ReadOptions, self.read, "read")
        put("poolings", value_tuple(self.poolings, "poolings", _pooling))
        put("methods", value_tuple(self.methods, "methods", _as_is))  # checked by settings
        put("codes", checked_codes(self.codes, self.methods))
        put("flow_seeds", value_tuple(self.flow_seeds, "flow_seeds", _as_is))  # checked with the flow's options
        if self.flow_options is not None and not isinstance(self.flow_options, dict):
            raise BertWhiteningError("flow_options must be a dict, got %s" % type(self.flow_options).__name__)
        if self.flow_options is not None:  # a copy: the caller's dict changed later changes nothing here
            put("flow_options", dict(self.flow_options))
        self.settings  # noqa: B018  every setting's FitOptions and the methods, refused now

    @property
    def reported_fit_on(self):
        """``fit_on`` as a report's JSON records it: a name, or a list of files."""
        return self.fit_on if isinstance(self.fit_on, str) else list(self.fit_on)

    @property
    def settings(self) -> list[Setting]:
        """The settings evaluated, in order (`settings`)."""
        return settings(self.n_components, self.betas, self.gammas, self.methods, self.flow_seeds)


def checked_codes(codes, methods):
    """``codes`` as a tuple of code names (`bert_whitening.codes.code_list`), refusing int8 beside
    a flow: int8's scales are a whitening's spread of each coordinate, which a flow has not."""
    codes = code_list(codes)
    if "int8" in codes and "flow" in methods:
        raise BertWhiteningError(
            "codes int8 take their scales from a whitening, which a flow has not: drop int8 "
            "or the flow (binary codes work with flows)"
        )
    return codes


def checked_fit_on(fit_on):
    """``fit_on`` as the evaluation takes it: ``"all"``, ``"train"``, or a tuple of file paths,
    refusing one path not in a list (it would be read as its characters, each a file) and
    ``all`` or ``train`` among files (unless a file of that name exists)."""
    if isinstance(fit_on, str) and fit_on in ("all", "train"):
        return fit_on
    paths = tuple(path_list(fit_on, "fit_on"))
    named = [path for path in paths if path in ("all", "train") and not os.path.exists(path)]
    if named:
        raise BertWhiteningError("--fit-on %s is given alone, not among files" % named[0])
    return paths


def cosine_spearman(first: np.ndarray, second: np.ndarray, labels: np.ndarray) -> float:
    """Spearman correlation of the row-wise cosine of two vector sets with the labels."""
    sims = (l2_normalize(first) * l2_normalize(second)).sum(axis=1)
    return float(scipy.stats.spearmanr(labels, sims).correlation)


def encode_splits(
    encode: Callable[[list], np.ndarray], splits: dict[str, list]
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{split: (first_vectors, second_vectors, labels)}``; ``encode`` maps a list of sentences
    to an array. Each distinct sentence of the task goes through one call once (about a tenth of
    the Chinese STS-B test split is repeated), so they are sorted together."""
    sentences = distinct_sentences(splits)
    return _pairs(np.asarray(encode(sentences), dtype=np.float64), sentences, splits)


def encode_splits_together(
    encoders: dict, splits: dict[str, list], batch_size: int = 128
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """``{pooling: encode_splits(...)}`` of the unwhitened ``encoders`` of one
    `bert_whitening.models.build_encoders` call, from one forward pass per batch
    (`bert_whitening.encoding.encode_together`)."""
    from bert_whitening.encoding import encode_together

    sentences = distinct_sentences(splits)
    vectors = encode_together(list(encoders.values()), sentences, batch_size)
    return {
        pooling: _pairs(np.asarray(block, dtype=np.float64), sentences, splits)
        for pooling, block in zip(encoders, vectors, strict=True)
    }


def _pairs(vectors, sentences, splits):
    """``{split: (first_vectors, second_vectors, labels)}`` from the rows of ``sentences``."""
    row = {sentence: i for i, sentence in enumerate(sentences)}
    return {
        split: (
            vectors[[row[a] for a, _, _ in pairs]],
            vectors[[row[b] for _, b, _ in pairs]],
            np.array([label for _, _, label in pairs]),
        )
        for split, pairs in splits.items()
    }


def _check_fit_on(fit_on, loaded):
    """Refuse, before a model is built, a ``fit_on`` the fit could not read: ``train`` for a task
    without a train split, a path that is not in a list, ``all`` or ``train`` among files, a file
    that cannot be read."""
    if fit_on == "train":
        for task, splits in loaded.items():
            if "train" not in splits:
                raise BertWhiteningError(
                    "--fit-on train: %s has no train split (splits: %s)" % (task, ", ".join(splits))
                )
    elif fit_on != "all":
        check_readable(list(checked_fit_on(fit_on)))


def _fit_blocks(encoded, fit_on):
    """``(name, vectors)`` of both sentences of every pair of ``all`` splits, or of ``train``;
    the name (``the train split's first sentences``) is what a refusal of a row names."""
    if fit_on == "train" and "train" not in encoded:
        raise BertWhiteningError("--fit-on train: this task has no train split (splits: %s)" % ", ".join(encoded))
    for split in encoded if fit_on == "all" else ["train"]:
        first, second, _ = encoded[split]
        yield "the %s split's first sentences" % split, first
        yield "the %s split's second sentences" % split, second


def fit_statistics(
    encoded: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    fit_on: str | Sequence[str] = "all",
    statistics_from_files: Optional[Callable] = None,
) -> WhiteningStats:
    """Whitening statistics of the task's vectors (``all`` splits or ``train``), or for a list
    of files ``statistics_from_files(paths)`` (`bert_whitening.encoding.statistics_from_files`)."""
    if fit_on not in ("all", "train"):
        return _some_sentences(statistics_from_files(fit_on), fit_on)
    stats = WhiteningStats()
    for name, block in _fit_blocks(encoded, fit_on):
        stats.update(block, name)
    return stats


def fit_statistics_and_vectors(
    encoded: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    fit_on: str | Sequence[str] = "all",
    statistics_and_vectors_from_files: Optional[Callable] = None,
) -> tuple[WhiteningStats, np.ndarray]:
    """`fit_statistics`, accumulated as it accumulates them, and the vectors they come from, as
    one array, for a flow, which needs them all: a whitening scored beside a flow is the one
    scored without (its statistics from one array differed in round-off, which ``k = all``
    showed in the third decimal). For a list of files ``statistics_and_vectors_from_files(paths)``
    (`bert_whitening.encoding.statistics_and_vectors_from_files_together`)."""
    if fit_on not in ("all", "train"):
        stats, vectors = statistics_and_vectors_from_files(fit_on)
        return _some_sentences(stats, fit_on), vectors
    return fit_statistics(encoded, fit_on), np.concatenate([block for _, block in _fit_blocks(encoded, fit_on)])


def _some_sentences(stats, files):
    """``stats`` of the ``--fit-on`` ``files``, refused naming them when they held no sentence
    (the fit's "needs at least 2 vectors" named the task)."""
    if not stats.count:
        raise DataError("--fit-on %s: no sentences in %s" % (", ".join(files), "it" if len(files) == 1 else "them"))
    return stats


def fit_key(setting: Setting) -> tuple:
    """What a setting fits, shared by the settings that differ only in ``k``."""
    if setting.method == "flow":
        return ("flow", setting.seed)
    return ("whitening", setting.beta, setting.gamma)


def check_flow_settings(flow_options, seeds):
    """``flow_options`` (further arguments of `bert_whitening.flow.fit_flow`) checked with each
    of the flow settings' ``seeds``, before anything is encoded or fitted: an unknown name, a
    value ``fit_flow`` refuses or a ``seed`` (each setting has its own) is one `FlowError`.
    Returns the flow's `bert_whitening.flow.FlowConfig`."""
    from bert_whitening.errors import FlowError
    from bert_whitening.flow import check_flow_options

    if "seed" in (flow_options or {}):
        raise FlowError("flow_options cannot hold seed: flow_seeds gives each flow's")
    for seed in seeds:
        check_flow_options({"seed": seed})
    return check_flow_options(flow_options or {})["config"]


def _fit(setting, stats, vectors, flow_options):
    if setting.method == "whitening":
        return fit_whitening(stats, beta=setting.beta, gamma=setting.gamma)
    if vectors is None:
        raise BertWhiteningError("a flow is trained on the vectors themselves: pass vectors")
    from bert_whitening.flow import fit_flow  # imports TensorFlow

    return fit_flow(vectors, seed=setting.seed, **(flow_options or {}))


def whitened_settings(
    stats: WhiteningStats,
    requested: Sequence[Setting],
    allow_rank_deficient: bool = False,
    vectors: Optional[np.ndarray] = None,
    flow_options: Optional[dict] = None,
) -> tuple[list, dict]:
    """``([(setting, k, transform)], fitted)``: for each setting the resolved ``k`` (a flow's
    dimension) and the function from vectors to whitened (or flow) unit vectors, only normalised
    when ``k`` is 0. Each `fit_key` is fitted once, and ``fitted`` maps it to ``(model, seconds)``:
    a `Whitening` of ``stats``, or a `bert_whitening.flow.Flow` trained on ``vectors`` by
    ``fit_flow(vectors, seed=setting.seed, **flow_options)``."""
    flow_seeds = [setting.seed for setting in requested if setting.method == "flow" and setting.n_components]
    if flow_seeds:
        check_flow_settings(flow_options, flow_seeds)
    fitted, prepared = {}, []
    for setting in requested:
        k, transform = 0, l2_normalize
        if setting.n_components:
            key = fit_key(setting)
            if key not in fitted:
                started = time.perf_counter()
                fitted[key] = (_fit(setting, stats, vectors, flow_options), time.perf_counter() - started)
            model = fitted[key][0]
            if setting.method == "flow":
                k, transform = model.dim, lambda vectors, flow=model: l2_normalize(flow.transform(vectors))
            else:
                k = model.components(setting.n_components, allow_rank_deficient)
                transform = functools.partial(model.transform, n_components=k, allow_rank_deficient=True)
        prepared.append((setting, k, transform))
    return prepared, fitted


def evaluate(
    encoded: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    stats: WhiteningStats,
    requested: Sequence[Setting],
    allow_rank_deficient: bool = False,
    vectors: Optional[np.ndarray] = None,
    flow_options: Optional[dict] = None,
    codes: Sequence[str] = ("float32",),
) -> tuple[list[dict], Optional[Whitening]]:
    """One result per setting and code (in that order): ``{"setting", "method" (raw, whitening or
    flow), "n_components" (resolved), "codes", "bytes" (what a stored vector takes), "beta",
    "gamma" (a whitening's), "seed" (a flow's), "fit_seconds" (None for raw; one fit shared by
    several ``k`` reports its time for each), "splits": {split: spearman}, "avg", "w-avg"}``, a
    flow's with its ``"training"`` summary, plus the fitted whitening (for its eigenvalues), or
    None when no setting is a whitening. ``vectors`` and ``flow_options`` as in
    `whitened_settings`; ``codes`` as `checked_codes` takes them, each setting's unit vectors
    quantised by `code_quantizer` and compared by its cosine of codes."""
    codes = checked_codes(codes, [setting.method for setting in requested])
    counts = np.array([len(labels) for _, _, labels in encoded.values()])
    prepared, fitted = whitened_settings(stats, requested, allow_rank_deficient, vectors, flow_options)
    original = fit_key(Setting(-1))
    raw_scales = functools.cache(lambda: fitted[original][0] if original in fitted else fit_whitening(stats))
    results = []
    for setting, k, transform in prepared:
        model, seconds = fitted[fit_key(setting)] if setting.n_components else (None, None)
        unit = {
            split: (transform(first), transform(second), labels) for split, (first, second, labels) in encoded.items()
        }
        for code in codes:
            coder = code_quantizer(code, k, stats.dim, (lambda model=model: model) if model else raw_scales)
            scores = {
                split: codes_spearman(coder, first, second, labels) for split, (first, second, labels) in unit.items()
            }
            values = np.array(list(scores.values()))
            flow = setting.method == "flow"
            result = {
                "setting": setting.label,
                "method": setting.method if setting.n_components else "raw",
                "n_components": k,
                "codes": code,
                "bytes": coder.bytes,
                "beta": None if flow else setting.beta,
                "gamma": None if flow else setting.gamma,
                "seed": setting.seed if flow else None,
                "fit_seconds": seconds,
                "splits": scores,
                "avg": float(values.mean()),
                "w-avg": float(np.average(values, weights=counts)),
            }
            if flow:
                result["training"] = dict(model.training_summary)
            results.append(result)
    whitenings = {key[1:]: model for key, (model, _) in fitted.items() if key[0] == "whitening"}
    return results, whitenings.get((1.0, 1.0)) or next(iter(whitenings.values()), None)


def code_quantizer(codes: str, k: int, dim: int, whitening: Callable[[], Whitening]):
    """The `bert_whitening.codes.Quantizer` of a setting's unit vectors of ``k`` dimensions (0:
    raw, ``dim`` of them) in ``codes``. int8's scales are those of ``whitening()``
    (`Whitening.quantizer`): the setting's own, or for raw vectors a whitening of the same
    statistics, whose `Whitening.coordinate_rms` of 0 is the raw coordinates' spread; a flow
    (refused by `checked_codes`) has none."""
    if codes != "int8":
        return quantizer(codes, k or dim)
    return whitening().quantizer(k, codes, allow_rank_deficient=True)


def codes_spearman(coder, first: np.ndarray, second: np.ndarray, labels: np.ndarray) -> float:
    """Spearman correlation with the labels of the cosine of each pair's codes (``coder`` a
    `bert_whitening.codes.Quantizer`; ``first`` and ``second`` unit vectors, row by row). float32
    scores the float64 vectors as computed (`cosine_spearman`): rounding them to float32 moves
    near-equal cosines of a flow past each other, and float32 scores as it did before codes."""
    if coder.codes == "float32":
        return cosine_spearman(first, second, labels)
    sims = coder.cosine_rows(coder.encode(first), coder.encode(second))
    return float(scipy.stats.spearmanr(labels, sims).correlation)


def evaluate_tasks(
    config: "EncoderConfig",
    tasks: Sequence[str],
    options: EvalOptions = EvalOptions(),
    on_task: Optional[Callable[[str, str, dict], None]] = None,
) -> tuple | list[tuple]:
    """What ``bert-whitening eval`` does: ``(report, spectra)``.

    Args:
        config: a `bert_whitening.config.EncoderConfig` of the unwhitened encoder; its ``maxlen``
            None means each task's default (`task_maxlen`).
        tasks: senteval_cn task names (`TASKS`) or ``STS-B-en``.
        options: an `EvalOptions`: the settings, what they are fitted on, how files are read,
            the poolings, the flows; its ``flow_options`` are checked here, before a model is
            built (the flow's checks import TensorFlow).
        on_task: called as each task is done, ``on_task(title, task, report)`` (``title`` the
            task's name, with the pooling's when there are several; ``report`` that pooling's
            so far): the command line prints the task's table then, so that a later task's
            failure does not take the earlier ones' results with it. A refusal names its task.

    Returns the report (JSON-ready: settings, counts, per-split Spearman, ranks, versions,
    seconds) and ``{task: eigenvalues}`` of each task's whitening, for `write_report`; with
    ``poolings``, a list of those pairs, one per pooling in its order.
    """
    from bert_whitening.config import versions

    started = time.time()
    options = options_of(EvalOptions, options)
    requested = options.settings
    flows = "flow" in options.methods
    if flows:  # refused before a model is built, not after the first task is encoded
        flow_config = check_flow_settings(options.flow_options, options.flow_seeds)
    ks = [setting.n_components for setting in requested]  # a flow's -1; no whitening's k without one
    encoders, loaded = load_tasks(
        config, tasks, options.directory, ks, options.read, options.poolings, _correlatable, options.fit_on
    )
    first = next(iter(encoders.values()))
    if flows:
        flow_config.check(first.dim)
    head = {"model": first.model_identity, "data_dir": data_dir(options.directory), "fit_on": options.reported_fit_on}
    reports = {pooling: _report_head(head, pooling, versions()) for pooling in encoders}
    spectra = {pooling: {} for pooling in encoders}
    for task in loaded:
        with named_task(task.name):
            for pooling, entry, eigenvalues in _scored_task(task, requested, options, config.allow_rank_deficient):
                reports[pooling]["tasks"][task.name] = entry
                if eigenvalues is not None:
                    spectra[pooling][task.name] = eigenvalues
                if on_task:
                    on_task(task.label(pooling), task.name, reports[pooling])
    for report in reports.values():
        report["seconds"] = round(time.time() - started, 1)
    pairs = [(reports[pooling], spectra[pooling]) for pooling in encoders]
    return pairs if options.poolings else pairs[0]


def _report_head(head, pooling, versions):
    """One pooling's report before any task: ``head`` (model, data directory, ``fit_on``) in the
    order the JSON has always shown it."""
    return {
        "model": head["model"],
        "pooling": pooling,
        "data_dir": head["data_dir"],
        "fit_on": head["fit_on"],
        "tasks": {},
        "versions": versions,
    }


def _scored_task(task, requested, options, allow_rank_deficient):
    """``(pooling, entry, eigenvalues or None)`` of one loaded task for each of its poolings, on
    one encoding of the task: the statistics (and, for a flow, the vectors) fitted on, every
    setting scored. The vectors are held only when a flow needs them (the files are encoded once
    for both)."""
    fit_on = options.fit_on
    for pooling, encoded in encode_splits_together(task.encoders, task.splits, task.read.batch_size).items():
        if len(task.encoders) > 1:  # what follows (the fit's warnings) is this pooling's
            logger.info("%s: fitting and scoring", task.label(pooling))
        vectors = None
        if "flow" in options.methods:
            from_files = functools.partial(task.statistics_and_vectors_from_files, pooling=pooling)
            stats, vectors = fit_statistics_and_vectors(encoded, fit_on, from_files)
        else:
            stats = fit_statistics(encoded, fit_on, functools.partial(task.statistics_from_files, pooling=pooling))
        results, whitening = evaluate(
            encoded, stats, requested, allow_rank_deficient, vectors, options.flow_options, options.codes
        )
        entry = {
            "maxlen": task.maxlen,
            "counts": {split: len(pairs) for split, pairs in task.splits.items()},
            "fitted_on_vectors": stats.count,
            "results": results,
        }
        if options.codes != ("float32",):
            entry["budgets"] = budget_choices(results)
        if whitening is not None:
            entry["rank"] = whitening.rank
        yield pooling, entry, None if whitening is None else whitening.eigenvalues


@contextlib.contextmanager
def named_task(name):
    """A refusal while one task of several is evaluated names that task (a rank below a k, say,
    is a property of its data)."""
    try:
        yield
    except BertWhiteningError as error:
        error.args = ("%s: %s" % (name, error),) + error.args[1:]
        raise


@dataclasses.dataclass
class Task:
    """A loaded pair task and its encoders, one per pooling, built together and cut to the
    task's ``maxlen``; the methods use the first pooling's unless told another."""

    name: str
    splits: dict  #: ``{split: [(sentence1, sentence2, label)]}``
    maxlen: int
    encoders: dict  #: ``{pooling: Encoder}``
    read: ReadOptions = ReadOptions()  #: how its ``fit_on`` files are read, and its batch size
    _from_files: dict = dataclasses.field(default_factory=dict, repr=False)

    def encode(self, sentences, pooling=None):
        """sentences -> vectors."""
        from bert_whitening.encoding import encode

        return encode(self.encoders[self._pooling(pooling)], sentences, batch_size=self.read.batch_size)

    def statistics_from_files(self, paths, pooling=None):
        """paths -> `WhiteningStats`, for ``fit_on`` files."""
        from bert_whitening.encoding import statistics_from_files_together

        return self._files(statistics_from_files_together, paths, pooling)

    def statistics_and_vectors_from_files(self, paths, pooling=None):
        """paths -> ``(WhiteningStats, their vectors)``, for a flow fitted on files beside a whitening."""
        from bert_whitening.encoding import statistics_and_vectors_from_files_together

        return self._files(statistics_and_vectors_from_files_together, paths, pooling)

    def _files(self, together, paths, pooling):
        """The files are read and encoded once for every pooling, on the first call."""
        key = (together.__name__, tuple(paths))
        if key not in self._from_files:
            found = together(list(self.encoders.values()), paths, self.read)
            self._from_files[key] = dict(zip(self.encoders, found, strict=True))
        return self._from_files[key][self._pooling(pooling)]

    def _pooling(self, pooling):
        return pooling or next(iter(self.encoders))

    def label(self, pooling):
        """How logs and tables name this task's figures of ``pooling``: the task's name, and the
        pooling's when the task has several."""
        return "%s, %s pooling" % (self.name, pooling) if len(self.encoders) > 1 else self.name


def _correlatable(split, pairs, file):
    """Refuse a split ``eval`` cannot score: a Spearman with its labels needs pairs of two labels."""
    check_labels(pairs, file, "evaluation")


def load_tasks(
    config: "EncoderConfig",
    tasks: Sequence[str],
    directory: Optional[str] = None,
    n_components: Sequence[int] = (),
    read: ReadOptions = ReadOptions(),
    poolings: Sequence[str] = (),
    check_split: Optional[Callable[[str, list, str], None]] = None,
    fit_on: str | Sequence[str] = "all",
) -> tuple:
    """``(encoders, [Task])``: the tasks' files read (each split passed to ``check_split(split,
    pairs, file)``, which refuses what the evaluation cannot score, naming the file), the options
    checked against the model's configuration (``n_components`` against its hidden size), and
    then ``{pooling: Encoder}`` of ``poolings`` (else ``config.pooling``) built together once, with
    the longest ``maxlen`` any task needs (each task encodes with its own). ``fit_on`` is
    checked too (`_check_fit_on`). Settings that fit
    (``n_components`` not all 0) decide a pending ``--precision auto`` as float32
    (`bert_whitening.precision.fits_its_vectors`, `resolve_before_fitting`)."""
    from bert_whitening.models import build
    from bert_whitening.precision import fits_its_vectors, resolve_before_fitting

    directory = data_dir(directory)
    loaded = {task: load_task(task, directory, read.skip_bad_lines) for task in tasks}
    for task, splits in loaded.items() if check_split else ():  # before any model is built
        for split, pairs in splits.items():
            check_split(split, pairs, split_file(directory, task, split))
    _check_fit_on(fit_on, loaded)  # every run fits statistics (a raw one too): refused before the model
    maxlens = {task: task_maxlen(task, config.maxlen) for task in tasks}
    poolings = list(poolings) or [config.pooling]
    for pooling in poolings:
        check_choice("pooling", pooling, POOLINGS)
    config = dataclasses.replace(config, maxlen=max(maxlens.values()), pooling=poolings[0])
    config.check()
    config.check_n_components(n_components)
    configs = [dataclasses.replace(config, pooling=pooling) for pooling in poolings]
    if fits_its_vectors("eval", n_components):  # eval-retrieval's rule is eval's
        resolve_before_fitting()
    encoders = dict(zip(poolings, build(configs), strict=True))
    found = [
        Task(
            task,
            splits,
            maxlens[task],
            {pooling: encoder.with_maxlen(maxlens[task]) for pooling, encoder in encoders.items()},
            read,
        )
        for task, splits in loaded.items()
    ]
    return encoders, found


#: The byte budgets of a stored vector `budget_choices` answers for, largest first.
BUDGETS = (1536, 1024, 768, 512, 384, 256, 128, 64, 32, 16, 8, 4)


def chosen_on(splits: Sequence[str]) -> str:
    """The split a setting is chosen on: ``valid``, else ``train``, else the first there is (a
    pair file of one's own is a test split alone, so there the choice is made on what it scores)."""
    return next((split for split in ("valid", "train") if split in splits), next(iter(splits)))


def budget_choices(results: Sequence[dict]) -> list[dict]:
    """For each of `BUDGETS` that some result fits in (its ``bytes`` at most the budget), the
    result with the best Spearman on the `chosen_on` split among those (the first of equals; an
    undefined one never chosen) and its test Spearman (None without a test split): ``{"bytes",
    "setting", "codes", "n_components", "vector_bytes", "chosen_on", "valid", "test"}``, where
    ``valid`` is the Spearman on ``chosen_on``. The table `format_budgets` prints and the JSON's."""
    if not results:
        return []
    split = chosen_on(list(results[0]["splits"]))
    scored = [result for result in results if math.isfinite(result["splits"][split])]
    choices = []
    for budget in BUDGETS:
        within = [result for result in scored if result["bytes"] <= budget]
        if within:
            best = max(within, key=lambda result: result["splits"][split])
            choices.append(
                {
                    "bytes": budget,
                    "setting": best["setting"],
                    "codes": best["codes"],
                    "n_components": best["n_components"],
                    "vector_bytes": best["bytes"],
                    "chosen_on": split,
                    "valid": best["splits"][split],
                    "test": best["splits"].get("test"),
                }
            )
    return choices


def format_budgets(task: str, report: dict) -> str:
    """The task's `budget_choices` as a table (``""`` when the report has none): per byte budget,
    the setting and code chosen on the valid split (or the split it says) and its test Spearman."""
    budgets = report["tasks"][task].get("budgets")
    if not budgets:
        return ""
    row = "%-8s %-20s %-8s %6s %8s %8s"
    split = budgets[0]["chosen_on"]
    lines = ["%s: the best setting within each byte budget, chosen on its %s split" % (task, split)]
    lines.append(row % ("budget", "setting", "codes", "bytes", split, "test"))
    for choice in budgets:
        test = "-" if choice["test"] is None else "%.4f" % choice["test"]
        lines.append(
            row
            % (
                choice["bytes"],
                choice["setting"],
                choice["codes"],
                choice["vector_bytes"],
                "%.4f" % choice["valid"],
                test,
            )
        )
    return "\n".join(lines)


def format_table(task: str, report: dict) -> str:
    """Split rows of one task of a report, one column per setting (and code: rows of the codes and
    their bytes follow the settings' when there is another code than float32), then ``avg``,
    ``w-avg`` and the seconds each setting's fit took (``-`` for raw); the task column as wide as
    its name (a pair file's path)."""
    results, counts = report["tasks"][task]["results"], report["tasks"][task]["counts"]
    row = "%%-%ds %%-6s %%7s" % max(10, len(task))
    lines = [row % ("task", "split", "pairs") + "".join(" %10s" % result["setting"] for result in results)]
    if any(result.get("codes", "float32") != "float32" for result in results):  # rows of earlier reports: float32
        lines.append(row % (task, "codes", "") + "".join(" %10s" % result["codes"] for result in results))
        lines.append(row % (task, "bytes", "") + "".join(" %10d" % result["bytes"] for result in results))
    for split, count in counts.items():
        lines.append(row % (task, split, count) + "".join(" %10.4f" % result["splits"][split] for result in results))
    for name in ("avg", "w-avg"):
        lines.append(row % (task, name, "") + "".join(" %10.4f" % result[name] for result in results))
    lines.append(
        row % (task, "fit s", "")
        + "".join(
            " %10s" % ("-" if result["fit_seconds"] is None else "%.2f" % result["fit_seconds"]) for result in results
        )
    )
    return "\n".join(lines)


def write_report(
    report: dict, json_path: Optional[str] = None, plot_path: Optional[str] = None, draw: Optional[Callable] = None
) -> None:
    """Write a report (``eval``'s or ``eval-retrieval``'s) as JSON and/or its plot, each
    atomically; ``draw(path)`` draws the plot. Both are checked before either is written
    (`check_outputs`: one path for both would keep only the plot), against what the report was
    made from (`report_inputs`)."""
    check_outputs([json_path, plot_path], report_inputs(report))
    if json_path:
        undefined = []
        text = json.dumps(_finite(report, "", undefined), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        if undefined:
            logger.warning(
                "%s: written as null (undefined: constant labels or constant similarities give no rank correlation)",
                ", ".join(undefined[:5]),
            )
        write_atomically(json_path, lambda path: _write_text(path, text))
        logger.info("wrote %s", json_path)
    if plot_path:
        write_atomically(plot_path, draw)
        logger.info("wrote %s", plot_path)


def report_inputs(report):
    """The files a report (one pooling's, or ``{"poolings": [...]}``) was made from: its tasks'
    files under its data directory, and its ``fit_on`` and distractor files."""
    inputs = []
    for one in report.get("poolings", [report]):
        inputs += task_files(one.get("data_dir"), list(one.get("tasks", {})))
        fit_on = one.get("fit_on", "all")
        inputs += [] if fit_on in ("all", "train") else list(fit_on)
        inputs += list(one.get("distractor_files", []))
    return inputs


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)


def _finite(value, where, undefined):
    """``value`` with every NaN or infinite number as None (JSON has no NaN), the key paths of
    those collected in ``undefined``."""
    if isinstance(value, dict):
        return {
            key: _finite(item, "%s.%s" % (where, key) if where else str(key), undefined) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_finite(item, "%s[%d]" % (where, i), undefined) for i, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        undefined.append(where)
        return None
    return value
