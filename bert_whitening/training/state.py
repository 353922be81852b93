"""The resumable state of a run with ``resume``: each completed epoch checkpointed in
``.NAME.bert-whitening-resume/`` beside the output (`Checkpoints`): the weights, the Adam
moments and step count, the shuffle's generator, the epochs' records and the kept epoch's
weights, so that a run stopped by a signal, an error or a crash can be continued by the same
call with ``resume`` and ends with the weights of a run that was never stopped.

The state is taken up only by a run of the same base model, files and settings
(`resumable_identity`; ``epochs`` may grow), and held locked by the run that uses it. It is
removed once the output is in place, or when the loss stops being finite (a resumed run would
meet the same step again); a damaged or edited state is refused in one line (`DamagedState`)
and left where it is.
"""

import contextlib
import dataclasses
import json
import logging
import os
import shutil
from typing import Optional

import numpy as np

from bert_whitening.arguments import is_finite_number
from bert_whitening.errors import TrainingError
from bert_whitening.io.atomic import kept_directory, write_stream_atomically
from bert_whitening.io.bounded import JSON_BYTES, NpzMembers
from bert_whitening.io.records import as_read, parse_json

logger = logging.getLogger(__name__)

#: What ends the name of a run's resumable state beside its output (``.NAME`` before it).
RESUME_SUFFIX = ".bert-whitening-resume"
#: The state's one file in that directory, replaced atomically after each epoch.
STATE_FILE = "state.npz"
#: The layout of `STATE_FILE`; a state of another layout is refused, not misread.
STATE_FORMAT = 2


class DamagedState(TrainingError):
    """A resumable state that cannot be taken up as it is (damaged, or edited by hand): refused,
    and left where it is for the user to look at or remove."""


def order_generator(seed):
    """The generator a run shuffles its pairs with: one ``permutation`` of them per epoch, drawn
    in turn (and checkpointed with the run). Called by the training benchmark too, so that the
    peer it compares with is given the same order."""
    return np.random.default_rng(seed)


@dataclasses.dataclass
class Checkpoints:
    """The resumable state of a run with ``resume``: its directory beside the output, the lock
    this run holds on it (a second run resuming at once is refused), this run's
    `resumable_identity`, and the state of `STATE_FILE` found there when the run started (None:
    a fresh start)."""

    directory: str
    lock: int
    identity: dict
    found: Optional[dict]

    @property
    def path(self):
        return os.path.join(self.directory, STATE_FILE)

    def save(self, arrays):
        """Replace the state by ``arrays`` (`write_atomically`: a kill mid-write keeps the last one)."""
        self._refuse_link()
        write_stream_atomically(self.path, lambda stream: np.savez(stream, **arrays), output=False)

    def read(self, use):
        """``use(members)`` on the state file's `NpzMembers` (each array checked by its header
        before it is read); a damaged or crafted state is one line saying how to start again."""
        self._refuse_link()
        try:
            with NpzMembers(self.path, DamagedState, "training state") as members:
                return use(members)
        except DamagedState as error:
            raise DamagedState("%s; remove %s to start again" % (error, self.directory)) from None

    def _refuse_link(self):
        """A symbolic link in the state's place is neither read nor written through: the state
        is the directory's own file."""
        if os.path.islink(self.path):
            raise DamagedState(
                "%s: a symbolic link, not a run's state; remove %s to start again" % (self.path, self.directory)
            )

    def arrays(self, shapes):
        """The state's arrays ``{name: shape}`` (its whole content besides the record), each
        refused unless of that shape and finite (the lock keeps them as they were checked)."""

        def read(members):
            members.expect(set(shapes) | {"state"})
            arrays = {name: members.array(name, shape, kinds="fi") for name, shape in shapes.items()}
            for name, array in arrays.items():
                if not np.isfinite(array).all():
                    raise DamagedState("%s: not a usable training state, %s holds NaN or inf" % (self.path, name))
            return arrays

        return self.read(read)

    def close(self, remove):
        """Release the lock, removing the directory first when ``remove`` or when it holds no state."""
        try:
            if remove or not os.path.exists(self.path):
                shutil.rmtree(self.directory, ignore_errors=True)
        finally:
            os.close(self.lock)


@dataclasses.dataclass
class Epochs:
    """The epochs done so far: their records, the epoch kept, its weights (None: the weights as
    they are) and valid Spearman, and the epochs after which the run was resumed."""

    done: list
    kept: int
    kept_weights: Optional[list]
    best: Optional[float]
    resumed_after: list


def resumable_identity(plan):
    """What a state must share with a run to be continued by it: the base model (its identity
    and directory), the train and valid files' sha256 (not their paths), every setting but the
    number of epochs (a longer run passes through the same epochs first: the shuffle of epoch e
    and a constant learning rate do not depend on how many follow), and the state's layout."""
    settings = {name: value for name, value in plan.hyperparameters().items() if name != "epochs"}
    identity = {
        "format": STATE_FORMAT,
        "base_model": plan.base_model(),
        "train_sha256": plan.train.sha256,
        "valid_sha256": plan.valid.sha256 if plan.valid is not None else None,
        **settings,
    }
    return as_read(identity)  # as the state's JSON gives it back


def open_checkpoints(plan):
    """The `Checkpoints` of the plan's output, locked, and the state found there checked against
    this run (one line naming the first setting that differs); after every other refusal, so a
    refused run leaves no state directory it created."""
    output = plan.options.output
    directory, lock = kept_directory(output, RESUME_SUFFIX)
    if lock is None:
        raise TrainingError(
            "%s: another run training into %s holds this state; wait for it or give another --output"
            % (directory, output)
        )
    checkpoints = Checkpoints(directory, lock, resumable_identity(plan), None)
    try:
        if os.path.lexists(checkpoints.path):
            text = checkpoints.read(lambda members: str(members.array("state", (), kinds="U", limit=JSON_BYTES)))
            checkpoints.found = _checked_state(text, checkpoints)
            _check_resumable(checkpoints, plan.options.epochs)
    except BaseException:
        os.close(lock)
        raise
    return checkpoints


def _checked_state(text, checkpoints):
    """The state's record (JSON ``text``) once every field has the form `save_state` writes: a
    record edited by hand is refused in one line rather than failing halfway through a resume."""
    try:
        state = parse_json(text, checkpoints.path, TrainingError)
        epochs, kept, best, after = state["epochs"], state["kept"], state["best"], state["resumed_after"]
        validated = state["identity"]["valid_sha256"] is not None
        well_formed = (
            isinstance(epochs, list)
            and len(epochs) >= 1  # a state is saved after an epoch
            and all(_epoch_entry(entry, number, validated) for number, entry in enumerate(epochs, 1))
            and type(kept) is int
            and (1 <= kept <= len(epochs) if validated else kept == len(epochs))
            and (is_finite_number(best) if validated else best is None)
            and isinstance(after, list)
            and all(type(epoch) is int and 0 <= epoch <= len(epochs) for epoch in after)
            and after == sorted(after)
            and _generator_state(state["rng"])
        )
        if well_formed:
            order_generator(0).bit_generator.state = state["rng"]  # numpy checks the generator's
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        well_formed = False
    if not well_formed:
        raise DamagedState(
            "%s: cannot resume: its record is damaged or edited; remove %s to start again"
            % (checkpoints.path, checkpoints.directory)
        )
    return state


def _generator_state(rng):
    """Whether ``rng`` is the state of `order_generator`'s PCG64 as JSON gives it back: each of
    its integers in the range of the C integer numpy puts it in (numpy itself checks the form
    alone, and takes a ``has_uint32`` of 7 as true)."""
    inner = rng.get("state") if isinstance(rng, dict) else None
    return (
        isinstance(inner, dict)
        and set(rng) == {"bit_generator", "state", "has_uint32", "uinteger"}
        and rng["bit_generator"] == "PCG64"
        and set(inner) == {"state", "inc"}
        and all(type(inner[key]) is int and 0 <= inner[key] < 2**128 for key in ("state", "inc"))
        and rng["has_uint32"] in (0, 1)
        and type(rng["has_uint32"]) is int
        and type(rng["uinteger"]) is int
        and 0 <= rng["uinteger"] < 2**32
    )


def _epoch_entry(entry, number, validated):
    """Whether ``entry`` is the record `bert_whitening.training.loop` keeps of epoch ``number``."""
    keys = {"epoch", "train_loss", "steps", "seconds"} | ({"valid_spearman"} if validated else set())
    return (
        isinstance(entry, dict)
        and set(entry) == keys
        and entry["epoch"] == number
        and type(entry["steps"]) is int
        and entry["steps"] > 0
        and all(is_finite_number(entry[key]) for key in keys - {"epoch", "steps"})
    )


def _check_resumable(checkpoints, epochs):
    state, here = checkpoints.found, checkpoints.identity
    there = state.get("identity", {})
    for name in sorted(set(here) | set(there)):
        if here.get(name) != there.get(name):
            raise TrainingError(
                "%s: cannot resume: its %s is %s, this run's is %s; run with the same setting, or "
                "remove %s to start again"
                % (checkpoints.path, name, _shown(there.get(name)), _shown(here.get(name)), checkpoints.directory)
            )
    done = len(state["epochs"])
    if done > epochs:
        raise TrainingError(
            "%s: cannot resume: it has %d epochs done, more than epochs %d; ask for %d or more"
            % (checkpoints.path, done, epochs, done)
        )


def _shown(value):
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@contextlib.contextmanager
def kept_if_stopped(checkpoints):
    """Around a run with ``resume``: its state is removed once the output is in place, and when
    the loss stops being finite (a resumed run would take the same steps to the same loss); a
    signal, an error or a crash keeps it, for the same call with ``resume`` to continue; a
    damaged state is left as it was found."""
    if checkpoints is None:
        yield
        return
    try:
        yield
    except DamagedState:
        checkpoints.close(remove=False)
        raise
    except TrainingError:
        checkpoints.close(remove=True)
        raise
    except BaseException:
        checkpoints.close(remove=False)
        if os.path.exists(checkpoints.path):
            logger.warning(
                "the state after the last completed epoch is kept in %s: the same command with --resume "
                "continues from it",
                checkpoints.directory,
            )
        raise
    checkpoints.close(remove=True)


def save_state(checkpoints, run, variables, rng):
    """Save the state after an epoch: the run's bookkeeping and the shuffle's generator (JSON),
    every variable the next step reads (the model's, the loss's, Adam's moments and step
    count), and the kept epoch's weights when that epoch is not the last."""
    state = {
        "identity": checkpoints.identity,
        "epochs": run.done,
        "kept": run.kept,
        "best": run.best,
        "resumed_after": run.resumed_after,
        "rng": rng.bit_generator.state,
    }
    arrays = {"state": np.array(json.dumps(state))}
    arrays.update(("variable_%d" % number, variable.numpy()) for number, variable in enumerate(variables))
    if run.kept_weights is not None and run.kept != len(run.done):
        arrays.update(("kept_%d" % number, weight) for number, weight in enumerate(run.kept_weights))
    checkpoints.save(arrays)


def resumed(checkpoints, validated, transformer, variables, rng):
    """The `Epochs` of the state found, its variables and generator put back in place.
    ``transformer``: the weights an epoch keeps; ``validated``: the run has a valid file."""
    from bert_whitening.backend import keras

    state = checkpoints.found
    done = len(state["epochs"])
    shapes = {"variable_%d" % number: tuple(variable.shape) for number, variable in enumerate(variables)}
    kept_apart = validated and state["kept"] != done  # else the kept epoch is the last done
    if kept_apart:
        shapes.update(("kept_%d" % number, tuple(weight.shape)) for number, weight in enumerate(transformer))
    arrays = checkpoints.arrays(shapes)
    values = [arrays["variable_%d" % number] for number in range(len(variables))]
    _check_state_arrays(checkpoints, variables, values, sum(entry["steps"] for entry in state["epochs"]))
    keras.backend.batch_set_value(list(zip(variables, values, strict=True)))
    rng.bit_generator.state = state["rng"]
    kept_weights = None
    if kept_apart:
        kept_weights = [arrays["kept_%d" % number] for number in range(len(transformer))]
    elif validated:
        kept_weights = [weight.numpy() for weight in transformer]
    return Epochs(state["epochs"], state["kept"], kept_weights, state["best"], state["resumed_after"] + [done])


def _check_state_arrays(checkpoints, variables, values, steps):
    """Refuse a state whose arrays are not of their variables' types (an int32 array of float
    weights would be cut to integers without a word), or whose optimizer step count (the one
    integer scalar) is not the steps its epochs took: an edited record or step count."""
    for number, (variable, value) in enumerate(zip(variables, values, strict=True)):
        if value.dtype != variable.dtype.as_numpy_dtype:
            problem = "variable_%d holds %s, the variable is %s" % (number, value.dtype, variable.dtype.name)
        elif value.shape == () and value.dtype.kind == "i" and value != steps:
            problem = "its step count is %d, its epochs took %d steps" % (value, steps)
        else:
            continue
        raise DamagedState(
            "%s: cannot resume: %s: damaged or edited; remove %s to start again"
            % (checkpoints.path, problem, checkpoints.directory)
        )
