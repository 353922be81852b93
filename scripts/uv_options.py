"""Print the uv options that make `uv pip install` find packages where pip would.

uv installs the environment in half pip's time (compiling the bytecode on every core), but it
does not read pip's configuration files or PIP_* variables; the Makefile runs this with the
Python it makes the venv from and passes its output to uv, so a mirror or a local wheel
directory configured for pip keeps working. Without pip there is no configuration to pass on.
"""

import importlib.util
import subprocess
import sys


def uv_options(pip_config_list):
    """uv's options for the output of ``pip config list`` (lines ``section.key='value'``; a
    PIP_* variable is listed under ``:env:`` and wins over the files, as in pip)."""
    single, lists = {}, {"extra-index-url": [], "find-links": []}
    for line in sorted(pip_config_list.splitlines(), key=lambda line: line.startswith(":env:")):
        name, _, value = line.partition("=")
        key, values = name.rpartition(".")[2], value.strip("'\"").split()
        if key in ("index-url", "cert") and values:
            single[key] = values[-1]
        elif key in lists:
            lists[key] += [item for item in values if item not in lists[key]]
    options = [part for key, value in single.items() for part in ("--" + key, value)]
    options += [part for key, items in lists.items() for item in items for part in ("--" + key, item)]
    if lists["extra-index-url"] or lists["find-links"]:
        options += ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version of all indexes
    return options


if __name__ == "__main__":
    if importlib.util.find_spec("pip") is None:
        sys.exit(0)
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    print(" ".join(uv_options(listed.stdout)))
