"""The one module that imports TensorFlow: its start-up lines are swallowed, and shown only when
they can explain a failed import."""

import os
import subprocess
import sys

import pytest

from bert_whitening import backend


@pytest.mark.slow
def test_importing_the_backend_prints_nothing():
    environment = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", "import bert_whitening.backend"], capture_output=True, env=environment, timeout=300
    )
    assert result.returncode == 0 and result.stderr == b"", result.stderr


@pytest.mark.parametrize("raised, shown", [(ImportError("broken"), True), (KeyboardInterrupt(), False)])
def test_start_up_lines_are_shown_for_a_failed_import_not_for_a_signal(capfd, raised, shown):
    """A signal during the import stops the command with its one line; TensorFlow's oneDNN and
    CUDA notes before it would only be noise."""
    with pytest.raises(type(raised)):
        with backend._stderr_swallowed(True):
            os.write(2, b"a start-up line\n")
            raise raised
    assert ("a start-up line" in capfd.readouterr().err) == shown
