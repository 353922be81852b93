"""pytest plugin for scripts/mutation.py: keep only the tests that run no TensorFlow.

mutmut forks one process per mutant from a process that has run the tests; TensorFlow's thread
pools do not survive a fork (a child that runs an op waits for ever, and its mutant counts as
killed by the timeout), and its tests take seconds each. The numpy modules are mutated against
their numpy-level tests: those that use none of these fixtures are kept, and one that starts
TensorFlow all the same (a model written and built in the test, a flow's layers) is skipped at
its first op, before TensorFlow's runtime exists in the process.
"""

import pytest

TENSORFLOW_FIXTURES = {"tiny_model", "encoders", "whitened", "exported"}
#: The test that ran into TensorFlow, if the running one did.
_started = []


class TensorFlowRefused(RuntimeError):
    """What a test's first TensorFlow op raises here (in whatever thread runs it)."""


def pytest_configure(config):
    from tensorflow.python.eager import context

    def refused(self, *args, **kwargs):
        _started.append(True)
        raise TensorFlowRefused("TensorFlow is not started in a process that forks mutants")

    context.Context.ensure_initialized = refused


def _skipped_if_started():
    """A test that ran into TensorFlow (itself, or a fixture, whose error pytest raises again for
    every test that uses it) is skipped, whatever it made of the error."""
    _started.clear()
    try:
        result = yield
    except Exception as error:
        if not (_started or _refused(error)):
            raise
    else:
        if not _started:
            return result
    pytest.skip("starts TensorFlow, which a forked mutant cannot run")


def _refused(error):
    while error is not None:
        if isinstance(error, TensorFlowRefused):
            return True
        error = error.__cause__ or error.__context__
    return False


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_skipped_if_started)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_skipped_if_started)


def pytest_collection_modifyitems(config, items):
    kept = [item for item in items if not TENSORFLOW_FIXTURES & set(getattr(item, "fixturenames", ()))]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
