"""The separate environment with PyTorch that the comparisons with peers run in.

torch, transformers and sentence-transformers are never dependencies of bert-whitening: the
scripts that compare against them create ``.venv-torch`` on first use and run the peer's side
there, in a child process. torch is installed first, pinned to the CPU build these machines
carry, so that nothing later pulls a CUDA build.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv-torch")
PACKAGES = [["torch==2.13.0"], ["sentence-transformers==6.2.0", "transformers", "safetensors", "numpy"]]


def python():
    """The environment's interpreter, after creating the environment if it is not complete."""
    executable = os.path.join(VENV, "bin", "python")
    marker = os.path.join(VENV, ".installed")
    if not os.path.exists(marker):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        for group in PACKAGES:
            subprocess.run([executable, "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check"] + group, check=True)
        open(marker, "w").close()
    return executable
