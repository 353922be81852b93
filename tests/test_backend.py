"""The one module that imports TensorFlow: its start-up lines are swallowed, and shown only when
they can explain a failed import."""

import os
import platform
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


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="oneDNN's x86 kernels")
@pytest.mark.parametrize("setting, expected", [(None, True), ("0", False), ("1", True)])
def test_onednn_runs_on_every_x86_cpu_unless_the_environment_says_otherwise(setting, expected):
    """TensorFlow turns oneDNN on by itself only on CPUs with AVX512_VNNI or later; the backend
    turns it on for the others (AVX2 only), and keeps a value the user set."""
    environment = {key: value for key, value in os.environ.items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        environment["TF_ENABLE_ONEDNN_OPTS"] = setting
    code = (
        "import os\n"
        "from bert_whitening.layers import fused_bert\n"
        "print(fused_bert._onednn_rewrites(), os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [str(expected), setting or "1"]
