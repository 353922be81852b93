"""pytest plugin for scripts/mutation.py: keep only the tests that run no TensorFlow.

mutmut forks one process per mutant from a process that has run the tests; TensorFlow's thread
pools do not survive a fork, and its tests take seconds each. The numpy modules are mutated
against their numpy-level tests, which use none of these fixtures.
"""

TENSORFLOW_FIXTURES = {"tiny_model", "encoders", "whitened", "exported"}


def pytest_collection_modifyitems(config, items):
    kept = [item for item in items if not TENSORFLOW_FIXTURES & set(getattr(item, "fixturenames", ()))]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
