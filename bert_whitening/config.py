"""What made a set of vectors: one `EncoderConfig`, recorded and compared wherever vectors meet.

A whitening file says what it was fitted on, an index directory what encoded its corpus, an
export what its graph computes; a query must be encoded as its corpus was, and an export's
``serve_search`` must embed as its corpus was embedded. All of them record
`EncoderConfig.to_config()` and compare with `EncoderConfig.differences`, so every field that
changes the vectors is recorded and compared in one place (`VECTOR_FIELDS`).

No TensorFlow here: the checks a command runs before it loads a model
(`bert_whitening.checkpoints.architecture.check_model`, `EncoderConfig.check`) answer at once;
`bert_whitening.models.build` builds what a configuration describes.
"""

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import sys
from typing import Optional

from bert_whitening.arguments import boolean, optional_integer, optional_path, positive_int, shown, text
from bert_whitening.checkpoints import BUILTIN_MODEL, find_model, model_directory
from bert_whitening.checkpoints.architecture import block_bytes_per_token, check_options, not_fused_because
from bert_whitening.errors import BertWhiteningError, ExportError, WhiteningError
from bert_whitening.io.bounded import MODEL_SIZES, check_memory
from bert_whitening.io.records import Schema, as_read, check_fields
from bert_whitening.names import DEFAULT_POOLING, MODEL_TYPES

logger = logging.getLogger(__name__)

#: The recorded fields that change the vectors; any difference in them is a different encoder.
VECTOR_FIELDS = ("model", "pooling", "maxlen", "lowercase", "whitening", "flow", "n_components", "normalize")


def versions():
    """Versions of what produced a record (read from package metadata: no import of them)."""
    found = {}
    for name in ("tensorflow", "tf-keras", "bert4keras", "tensorflow-text", "bert-whitening"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _say_untrained_settings(name, trained, settings):
    """A warning, once a process for each model and settings, when the model ``name`` `train`
    wrote is used under other ``settings`` (pooling, maxlen, case) than it was ``trained`` under
    (`ModelFiles.trained_as`): allowed (eval compares poolings), and easy to miss (each
    command's defaults are the base model's)."""
    differ = [key for key in trained if trained[key] != settings[key]]
    if differ:
        _warn_once(
            "%s was trained with %s; these vectors are made with %s"
            % (
                name,
                ", ".join("%s %s" % (key, json.dumps(trained[key]).strip('"')) for key in differ),
                ", ".join("%s %s" % (key, json.dumps(settings[key]).strip('"')) for key in differ),
            )
        )


@functools.lru_cache(maxsize=None)
def _warn_once(message):
    logger.warning("%s", message)


def check_fitted_on(what, fitted, identity, pooling, tokenization=None):
    """Refuse a whitening or a flow (``what``) ``fitted`` on vectors of another size, pooling,
    model or tokenization (maxlen, case) than those of an encoder of the model ``identity``,
    ``pooling`` and ``tokenization`` (`EncoderConfig.tokenization`; None: not yet known, as in
    evaluation before a task's maxlen): the one check of a fitted file against the model, for
    whitenings and flows alike."""
    if fitted.dim != identity["hidden_size"]:
        raise WhiteningError(
            "the %s has dimension %d but the model's hidden size is %d: it was fitted on another model (%s)"
            % (what, fitted.dim, identity["hidden_size"], (fitted.model_identity or {}).get("name", "?"))
        )
    if fitted.model_identity and not fitted.pooling:  # a fit from a model records both
        raise WhiteningError(
            "the %s records the model %s but no pooling: it was edited (a fit records both)"
            % (what, fitted.model_identity.get("name", "?"))
        )
    if fitted.pooling and fitted.pooling != pooling:
        raise WhiteningError("the %s was fitted on %s pooling, the encoder uses %s" % (what, fitted.pooling, pooling))
    recorded = fitted.tokenization
    if recorded and tokenization and recorded != tokenization:
        raise WhiteningError(
            "the %s was fitted on text %s, the encoder reads it %s: give the same --maxlen and --cased "
            "as its fit, or fit it again"
            % (what, _described_tokenization(recorded), _described_tokenization(tokenization))
        )
    if fitted.model_identity:
        check_same_model("the %s" % what, fitted.model_identity, identity, WhiteningError)
    else:  # fitted on vectors given as numbers (or its record blanked): nothing to compare
        logger.warning(
            "the %s records no model%s: it was fitted on vectors given as numbers, and nothing "
            "checks that they came from %s",
            what,
            "" if fitted.pooling else " and no pooling",
            identity["name"],
        )


def _described_tokenization(tokenization):
    return "cut at maxlen %d, %s" % (tokenization["maxlen"], "lower-cased" if tokenization["lowercase"] else "cased")


#: What a model's identity holds, and of which type: an identity is read from files a user may
#: edit (whitening and flow files, index and export records, saved encoders). The optional
#: fields are those records of earlier versions lack, checked when present.
IDENTITY = Schema(
    required={"name": str, "type": str, "hidden_size": int, "vocab_sha256": str},
    optional={"format": str, "num_hidden_layers": int, "config_sha256": str, "weights_sha256": str},
)
#: The fields that say which model made the vectors; the name (a directory's) and the format
#: (a converted copy) do not change them. The configuration's digest covers what the weights'
#: do not: the same weights under another activation or number of heads compute other vectors.
_SAME_MODEL_FIELDS = ("type", "hidden_size", "num_hidden_layers", "config_sha256", "vocab_sha256", "weights_sha256")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def checked_identity(identity, source, error=BertWhiteningError):
    """``identity`` if every field is present, of its type (`IDENTITY`) and form (sha256s as 64
    hex digits, sizes positive and no larger than any model's, `MODEL_SIZES`, a known model
    type); else ``error`` naming ``source``. A record's sizes then bound what its reader allocates."""
    check_fields(identity, IDENTITY, "%s: the model identity" % source, error)
    for key in [key for key in (*IDENTITY.required, *IDENTITY.optional) if key in identity]:
        value = identity[key]
        if isinstance(value, int) and value > MODEL_SIZES[key]:
            raise error(
                "%s: the model identity's %r is %d, more than any model has (%d)"
                % (source, key, value, MODEL_SIZES[key])
            )
        if isinstance(value, int):
            well_formed = value > 0
        elif key.endswith("sha256"):
            well_formed = bool(_SHA256.fullmatch(value))
        else:
            well_formed = key != "type" or value in MODEL_TYPES
        if not well_formed:
            raise error("%s: the model identity's %r is %r, not a valid value" % (source, key, value))
    return identity


def check_same_model(what, recorded, identity, error=BertWhiteningError):
    """Refuse ``what`` (a whitening, a flow, an index, an export's record) made with another model
    than ``identity`` (this model's): the one comparison of a recorded model with the one given.
    Content decides (vocabulary and weights digests, sizes, type), not the directory's name; a
    record of an earlier version has no weights digest and is compared without it."""
    checked_identity(recorded, what, error)
    differ = _model_fields_differing(recorded, identity)
    if differ:
        converted = recorded.get("format") not in (None, identity.get("format"))
        raise error(
            "%s was made with another model (%s; its %s differ from %s's): refused%s"
            % (
                what,
                _model_key(recorded),
                " and ".join(_FIELD_NAMES.get(key, key) for key in differ),
                identity["name"],
                "; a copy in another format (%s, not %s) counts as another model: fit or build it again with this one"
                % (recorded["format"], identity.get("format"))
                if converted
                else "",
            )
        )
    if "weights_sha256" not in recorded:
        logger.warning(
            "%s records no digest of the model's weights (an earlier version wrote it): it cannot "
            "tell %s from a fine-tuned copy with its vocabulary",
            what,
            recorded.get("name"),
        )


def _model_fields_differing(recorded, identity):
    """The fields of `_SAME_MODEL_FIELDS` that ``recorded`` holds with another value."""
    return [key for key in _SAME_MODEL_FIELDS if key in recorded and recorded[key] != identity.get(key)]


_FIELD_NAMES = {
    "config_sha256": "configurations",
    "vocab_sha256": "vocabularies",
    "weights_sha256": "weight files",
    "hidden_size": "hidden sizes",
}


def whitening_components(whitening, identity, pooling, tokenization, n_components=None, allow_rank_deficient=False):
    """The number of whitened dimensions to keep of ``whitening`` for an encoder of the model
    ``identity``, ``pooling`` and ``tokenization``; refuses a whitening fitted on other vectors
    (`check_fitted_on`)."""
    check_fitted_on("whitening", whitening, identity, pooling, tokenization)
    return whitening.components(n_components, allow_rank_deficient)


def whitening_digest(whitening):
    """sha256 of what a whitening computes (its arrays and parameters), wherever it is stored:
    two copies of one file, or a file and the same whitening in memory, have the same digest."""
    digest = hashlib.sha256()
    for array in (whitening.kernel, whitening.bias):
        digest.update(array.astype("<f8").tobytes())
    digest.update(repr((whitening.beta, whitening.gamma)).encode())
    return digest.hexdigest()


def flow_digest(flow):
    """sha256 of what a flow computes (its shape and weights), wherever it is stored."""
    digest = hashlib.sha256(repr(sorted(dataclasses.asdict(flow.config).items())).encode())
    for weight in flow.get_weights():
        digest.update(weight.astype("<f8").tobytes())
    return digest.hexdigest()


def whitening_summary(whitening):
    """What a record says of a whitening: its `whitening_digest` and its fit's summary."""
    return {
        "digest": whitening_digest(whitening),
        "beta": whitening.beta,
        "gamma": whitening.gamma,
        "count": whitening.count,
        "rank": whitening.rank,
        "fitted_on_model": whitening.model_identity,
    }


def flow_summary(flow):
    """What a record says of a flow: its `flow_digest`, its shape, its training and its model."""
    return {
        "digest": flow_digest(flow),
        "config": dataclasses.asdict(flow.config),
        "training": dict(flow.training_summary),
        "fitted_on_model": dict(flow.model_identity),  # plain: Keras wraps what a model holds
    }


@dataclasses.dataclass(frozen=True, eq=False)
class EncoderConfig:
    """How to build an encoder, whitened or not, and what its vectors are: small and picklable
    (Beam ships it to its workers), unlike the encoder. Frozen: an encoder built from it and
    the record written of it describe the same vectors (`dataclasses.replace` makes another).
    Compared by `differences` (what the vectors are), not ``==``, which is identity: field by
    field, it held two whitenings' arrays to each other, which numpy refuses.

    Attributes:
        model: a Google-format or Hugging Face BERT directory; None or ``minilm`` for the
            built-in all-MiniLM-L6-v2.
        model_type: the family (`bert_whitening.names.MODEL_TYPES`).
        pooling: ``first-last-avg``, ``last-avg``, ``cls`` or ``pooler``.
        maxlen: tokens per sentence with ``[CLS]`` and ``[SEP]``; None only where a caller fills
            it in per task (evaluation).
        lowercase: lower-case and strip accents before wordpiece.
        whitening: a fitted `bert_whitening.whitening.Whitening`, or None.
        n_components: 0 = no whitening, negative = all, ``k``; None = the whitening's default.
        normalize: end with the L2 normalisation.
        allow_rank_deficient: allow a ``k`` above the rank of the covariance.
        whitening_path: the file the whitening was read from, recorded (not compared).
        flow: a trained `bert_whitening.flow.Flow` in place of the whitening (it keeps every
            dimension), or None.
        flow_path: the file the flow was read from, recorded (not compared).
        model_files: the `ModelFiles` found for ``model`` (`files`), kept by a configuration made
            from this one (``dataclasses.replace``) while its model is the same directory: every
            configuration of one model reads and hashes the files checked once, whatever the
            directory holds since. Neither recorded nor pickled.
    """

    model: Optional[str] = None
    model_type: str = "bert"
    pooling: str = DEFAULT_POOLING
    maxlen: Optional[int] = 64
    lowercase: bool = True
    whitening: object = None
    n_components: Optional[int] = None
    normalize: bool = False
    allow_rank_deficient: bool = False
    whitening_path: Optional[str] = None
    flow: object = None
    flow_path: Optional[str] = None
    model_files: object = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        """Refuse a field of the wrong type, in one line naming it, whoever builds the
        configuration (`SentenceEncoder.load`, the command line, a record, ``dataclasses.replace``):
        a ``"no"`` for a bool would be taken as true, a ``1.5`` for a count cut to 1, a ``"64"``
        fail deep inside. Paths (``pathlib`` too) are kept as str; nothing is read here."""
        from bert_whitening.whitening import Whitening

        checked = {
            "model": optional_path(self.model, "model"),
            "model_type": text(self.model_type, "model_type"),
            "pooling": text(self.pooling, "pooling"),
            # None: filled in per task (evaluation); `check` refuses it
            "maxlen": None if self.maxlen is None else positive_int(self.maxlen, "maxlen"),
            **{name: boolean(getattr(self, name), name) for name in ("lowercase", "normalize", "allow_rank_deficient")},
            "n_components": optional_integer(self.n_components, "n_components"),
            "whitening_path": optional_path(self.whitening_path, "whitening_path"),
            "flow_path": optional_path(self.flow_path, "flow_path"),
        }
        if self.whitening is not None and not isinstance(self.whitening, Whitening):
            raise BertWhiteningError(
                "whitening must be a Whitening (to SentenceEncoder.load, or its file) or None, got %s"
                % "%s %s"
                % (type(self.whitening).__name__, shown(self.whitening))
            )
        flow_module = sys.modules.get("bert_whitening.flow")  # no Flow exists before it is imported
        if self.flow is not None and not (flow_module and isinstance(self.flow, flow_module.Flow)):
            raise BertWhiteningError(
                "flow must be a Flow (to SentenceEncoder.load, or its file) or None, got %s"
                % "%s %s"
                % (type(self.flow).__name__, shown(self.flow))
            )
        for name, value in checked.items():  # frozen: set once, here (see the class docstring)
            object.__setattr__(self, name, value)

    def check(self):
        """Refuse what the options and the model's configuration rule out, before any weights
        are read (see `components`)."""
        self.components  # noqa: B018  computed once, it runs every check

    def check_exportable(self, text, precision):
        """Refuse, before the model is built, an export these vectors' model cannot have:
        ``serve_text`` (``text``) for a model that splits words with jieba, which no TensorFlow
        op does, and ``precision`` bfloat16 for one `FusedBert` does not compute (the bfloat16
        products are FusedBert's)."""
        family = MODEL_TYPES[self.model_type.lower()]
        if text and family.word_level:
            raise ExportError(
                "--text is not available for %s: it splits words with jieba, which cannot run inside a "
                "TensorFlow graph; export the token-id signature and tokenise on the client" % self.model_type
            )
        why = not_fused_because(family, self.files.config) if precision == "bfloat16" else None
        if why:
            raise ExportError(
                "--precision bfloat16 exports a plain BERT's products in bfloat16, and this %s model has %s: "
                "export it in float32" % (self.model_type, why)
            )

    @property
    def files(self):
        """The model's checked `ModelFiles` (configuration and vocabulary read once, weight files
        opened once), found on first use, or those of the configuration this one was made from."""
        if self.model_files is None or self.model_files.directory != model_directory(self.model):
            object.__setattr__(self, "model_files", find_model(self.model))  # frozen: see the class docstring
        return self.model_files

    @functools.cached_property
    def identity(self):
        """The model's identity (name, format, type, sizes, vocabulary and weights sha256)."""
        return self.files.identity(self.model_type.lower())

    @functools.cached_property
    def components(self):
        """The number of whitened dimensions to keep (0 without a whitening), once the options,
        the whitening or flow and the model are known to fit each other: one resolve step, run
        once for this configuration, before any weights are read."""
        check_options(self.files, self.model_type, self.pooling, self.maxlen)
        trained = self.files.trained_as  # a trained model's configuration and vocabulary checked against its record
        if trained and self.maxlen is not None:
            _say_untrained_settings(self.files.name, trained, {"pooling": self.pooling, **self.tokenization})
        if self.flow is not None:
            if self.whitening is not None:
                raise WhiteningError("a flow takes the place of the whitening: give one of them, not both")
            if self.n_components:
                raise WhiteningError("a flow keeps every dimension: n_components is for a whitening")
            check_fitted_on("flow", self.flow, self.identity, self.pooling, self.tokenization)
            return 0
        if self.whitening is None:
            if self.n_components:
                raise WhiteningError("n_components %d needs a whitening (--whitening FILE.npz)" % self.n_components)
            return 0
        return whitening_components(
            self.whitening, self.identity, self.pooling, self.tokenization, self.n_components, self.allow_rank_deficient
        )

    @property
    def tokenization(self):
        """How this encoder cuts and cases text, as a whitening or flow fitted on its vectors
        records it; None while ``maxlen`` is not yet known (evaluation fills it in per task)."""
        return None if self.maxlen is None else {"maxlen": self.maxlen, "lowercase": self.lowercase}

    def quantizer(self, codes=None):
        """The `bert_whitening.codes.Quantizer` of the vectors this encoder writes in ``codes``
        (None: its whitening's, else float32). Codes are of unit vectors; int8's scales are a
        whitening's, so int8 without one (or of a flow) is refused, before any weights are read."""
        from bert_whitening.codes import check_codes, quantizer

        default = self.whitening.codes if self.whitening is not None else "float32"
        codes = default if codes is None else check_codes(codes)
        k = self.components or (self.flow.dim if self.flow is not None else self.identity["hidden_size"])
        if codes != "float32" and not self.normalize:
            raise BertWhiteningError("%s codes are of unit vectors: drop --no-normalize (normalize=False)" % codes)
        if codes == "int8" and self.whitening is None:
            raise BertWhiteningError(
                "int8 codes take their scales from a whitening (fit --codes int8, or any whitening file): "
                "give --whitening, or choose binary"
            )
        if codes == "int8":
            return self.whitening.quantizer(self.components, codes, allow_rank_deficient=True)
        return quantizer(codes, k)

    @property
    def stages(self):
        """What computes these vectors, in order, for a refusal of them to name
        (`bert_whitening.vectors.check_vectors`): the model, then the flow or the whitening
        when one is applied (a whitening with ``n_components`` 0 is not)."""
        if self.flow is not None:
            return ("model", "flow")
        return ("model", "whitening") if self.components else ("model",)

    def check_n_components(self, counts):
        """Refuse a number of whitened dimensions to keep above the model's hidden size, from its
        configuration alone: a fit would otherwise fail only after encoding everything."""
        hidden = self.identity["hidden_size"]
        for k in counts:
            if k > hidden:
                raise BertWhiteningError(
                    "n_components %d is larger than the model's hidden size %d (%s)"
                    % (k, hidden, self.identity["name"])
                )

    def check_encoding_memory(self, sentences, dim, batch_size, calls_at_once):
        """Refuse encoding ``sentences`` sentences into one array of vectors of dimension ``dim``
        (the model's output: several poolings side by side when encoded together),
        ``batch_size`` a model call and ``calls_at_once`` calls under way, whose vectors and
        activations at this ``maxlen`` could not fit in the memory this process may use
        (`check_memory`): the largest tensors a call holds at once are one block's
        (`block_bytes_per_token`), and the vectors are float32."""
        per_call = min(batch_size, sentences)
        activations = calls_at_once * per_call * self.maxlen * block_bytes_per_token(self.files.config, self.maxlen)
        vectors = 4 * sentences * dim
        check_memory(
            "encoding %d sentences, %d a model call at maxlen %d" % (sentences, per_call, self.maxlen),
            {
                "of %s's activations for %d calls at once" % (self.identity["name"], calls_at_once): activations,
                "of float32 vectors of dimension %d" % dim: vectors,
            },
            BertWhiteningError,
            "give a smaller batch size"
            if activations >= vectors
            else "encode them in parts (encode_stream yields a block at a time; SentenceEncoder.encode_file and the "
            "encode command write the vectors as they come)",
        )

    def __getstate__(self):
        """Pickled without the found `ModelFiles` (it holds open files; a Beam worker finds the
        model again)."""
        return {**self.__dict__, "model_files": None}

    def read_paths(self):
        """The directory and files these vectors are made from (the model directory, the
        whitening and flow files), which no output of a run may be or lie in
        (`bert_whitening.io.atomic.check_outputs`); the built-in model's is the installed package's."""
        return [path for path in (model_directory(self.model), self.whitening_path, self.flow_path) if path]

    @property
    def dim(self):
        """The dimension of the vectors (reads the model's configuration)."""
        return self.components or self.identity["hidden_size"]

    def to_config(self):
        """The JSON record of these vectors. Keys of earlier versions are kept: ``model``,
        ``model_dir``, ``pooling``, ``maxlen``, ``lowercase``, ``whitening`` (``path`` and
        ``sha256`` of its file, with ``digest`` of its content and its fit's summary),
        ``n_components`` (resolved: 0 without a whitening), ``normalize``,
        ``allow_rank_deficient``; and ``flow`` (None, or as ``whitening``: ``digest``, its
        shape, training summary and model, ``path`` and ``sha256``)."""
        k = self.components
        whitening = None
        if k:
            whitening = {**whitening_summary(self.whitening), **_file_record(self.whitening_path)}
        flow = None
        if self.flow is not None:
            flow = {**flow_summary(self.flow), **_file_record(self.flow_path)}
        model = None if self.model in (None, BUILTIN_MODEL) else os.path.abspath(self.model)
        return {
            "model": self.identity,
            "model_dir": model,
            "pooling": self.pooling,
            "maxlen": self.maxlen,
            "lowercase": self.lowercase,
            "whitening": whitening,
            "flow": flow,
            "n_components": k,
            "normalize": self.normalize,
            "allow_rank_deficient": self.allow_rank_deficient,
        }

    @classmethod
    def from_config(cls, config, whitening=None, model=None, flow=None, where=None):
        """The encoder a record describes. ``whitening`` (a `Whitening`) or ``flow`` (a `Flow`)
        must be given when the record has one, and is checked against its digest; ``model``
        replaces the recorded directory (a model that moved) and is checked against the recorded
        identity. A record of an earlier version (no ``normalize``: it was True for indexes; no
        ``flow``) is read too. ``where``, the file the record was read from (a saved encoder's
        ``sentence_encoder.json``, an index's ``index.json``), begins every refusal of what the
        record says: a value edited there is refused by the checks of any encoder, which do not
        know where it came from. A ``model`` the caller gave is not the record's: its own
        refusals (a directory that does not exist) name it alone."""
        with _blamed_on(where):
            built = cls._from_record(config, whitening, model, flow)
        if model is not None:
            built.files  # noqa: B018  found (and checked) now, outside the record's refusals
        with _blamed_on(where):
            check_same_model("the record", config["model"], built.identity)
            built.check()
        return built

    @classmethod
    def _from_record(cls, config, whitening, model, flow):
        """The encoder ``config`` describes, not yet checked against its model."""
        config = checked_record(config)
        recorded = config["whitening"]
        _check_recorded("whitening", recorded, whitening, whitening_summary)
        _check_recorded("flow", config.get("flow"), flow, flow_summary)
        return cls(
            model=model or config["model_dir"],
            model_type=config["model"]["type"],
            pooling=config["pooling"],
            maxlen=config["maxlen"],
            lowercase=config["lowercase"],
            whitening=whitening,
            n_components=config["n_components"] if whitening else None,
            normalize=config.get("normalize", True),
            allow_rank_deficient=config.get("allow_rank_deficient", False),
            whitening_path=(recorded or {}).get("path"),
            flow=flow,
            flow_path=(config.get("flow") or {}).get("path"),
        )

    def differences(self, config):
        """``["field: ours vs theirs", ...]`` over `VECTOR_FIELDS` against a record ``config``;
        empty when both encode alike. Whitenings compare by content (digest), so a copy of the
        file matches."""
        ours, theirs = self.to_config(), checked_record(config)
        found = []
        for field in VECTOR_FIELDS:
            mine, other = ours[field], theirs.get(field, True if field == "normalize" else None)
            if field in ("whitening", "flow"):
                same = _same_fitted(mine, other)
                mine, other = [(w or {}).get("digest", (w or {}).get("sha256", "none"))[:12] for w in (mine, other)]
            elif field == "model":
                same = not _model_fields_differing(other, mine)
                mine, other = _model_key(mine), _model_key(other)
            else:
                same = mine == other
            if not same:
                found.append("%s: %s vs %s" % (field, mine, other))
        return found


@contextlib.contextmanager
def _blamed_on(where):
    """Refusals inside the block begin with ``where``, the file a record was read from (none:
    unchanged)."""
    try:
        yield
    except BertWhiteningError as error:
        if where is None:
            raise
        raise type(error)("%s: %s" % (where, error)) from None


def _file_record(path):
    """``path`` and ``sha256`` of the file a whitening or flow was read from (none: empty)."""
    if not path:
        return {}
    from bert_whitening.io.files import file_sha256

    return {"path": os.path.abspath(path), "sha256": file_sha256(path)}


def _check_recorded(what, recorded, given, summary):
    """``given`` (a whitening or flow, or None) is the one the record has, by content digest,
    and the record's summary of it (``summary(given)``: beta, count, training, ...) is its own:
    a record edited by hand would describe vectors other than those it gives."""
    if (recorded is None) != (given is None):
        raise WhiteningError(
            "the record has %s %s, but %s was given"
            % ("a" if recorded else "no", what, "none" if given is None else "one")
        )
    if not recorded:
        return
    expected = as_read(summary(given))  # as a record holds it: lists, not tuples
    if "digest" in recorded and expected["digest"] != recorded["digest"]:
        raise WhiteningError(
            "this %s is not the one recorded (digest %s...): refused" % (what, str(recorded["digest"])[:12])
        )
    edited = sorted(key for key in expected if key in recorded and recorded[key] != expected[key])
    if edited:
        raise WhiteningError(
            "its %s record disagrees with the %s it names on %s (%s): edited by hand? refused"
            % (what, what, ", ".join(edited), "; ".join("%r vs %r" % (recorded[key], expected[key]) for key in edited))
        )


def _same_fitted(mine, other):
    """Two recorded whitenings (or flows) are the same by content digest; a record of an
    earlier version has none, and is compared by the sha256 of its file."""
    if not mine or not other:
        return mine == other
    if "digest" in mine and "digest" in other:
        return mine["digest"] == other["digest"]
    return mine.get("sha256") is not None and mine.get("sha256") == other.get("sha256")


def _model_key(identity):
    return "%s (%s, vocabulary %s..., weights %s...)" % (
        identity.get("name"),
        identity.get("type"),
        str(identity.get("vocab_sha256"))[:12],
        str(identity.get("weights_sha256", "unrecorded"))[:12],
    )


#: The keys of an encoder record and their types, checked before use: a record comes from a file
#: someone may edit. The optional ones are those a record of an earlier version lacks.
RECORD = Schema(
    required={
        "model": dict,
        "model_dir": (str, type(None)),
        "pooling": str,
        "maxlen": int,
        "lowercase": bool,
        "whitening": (dict, type(None)),
        "n_components": int,
    },
    optional={"flow": (dict, type(None)), "normalize": bool},
)


def checked_record(config):
    """``config`` if it has every key a record needs, of the right type; else a one-line error."""
    check_fields(config, RECORD, "the encoder record")
    checked_identity(config["model"], "the encoder record")
    return config
