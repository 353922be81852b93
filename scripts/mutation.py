"""Mutation testing of the numpy modules with mutmut (requirements-dev.txt; `make mutation`).

    python scripts/mutation.py [MODULE ...]     # default: whitening vectors serving data evaluation
    python scripts/mutation.py io.bounded arguments io.files io.npy_rows tokenization.token_ids precision names

For each module, a copy of the checkout is made under out/mutation/MODULE (mutmut writes its
mutants/ tree there), mutmut mutates bert_whitening/MODULE.py (io.bounded: io/bounded.py) and runs
against each mutant the fast tests that cover the mutated function and need no TensorFlow
(scripts/mutation_numpy_only.py says why). It prints, per module, the counts by outcome and the
score killed / tested, and writes each surviving mutant's diff to out/mutation/MODULE/survivors.txt
for review."""

import collections
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ("whitening", "vectors", "serving", "data", "evaluation")
TESTS = (
    "tests/test_whitening.py",
    "tests/test_serving_requests.py",
    "tests/io/test_http_client.py",
    "tests/test_data.py",
    "tests/test_evaluation.py",
    "tests/io/test_bounded.py",
    "tests/test_arguments.py",
    "tests/io/test_files.py",
    "tests/test_vectors.py",
    "tests/test_precision.py",
    "tests/tokenization/test_token_ids.py",
    "tests/test_names.py",
    "tests/test_config.py",
    "tests/retrieval/test_index_directory.py",
)


def copy_checkout(target):
    """The files git knows of (tracked, or new and not ignored), as they are in the work tree."""
    if os.path.exists(target):
        shutil.rmtree(target)
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.join(target, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(target, name))


def write_config(target, module):
    lines = [
        "[mutmut]",
        "source_paths = bert_whitening",
        "only_mutate = bert_whitening/%s.py" % module.replace(".", "/"),
        "also_copy =",
        "    scripts",
        "pytest_add_cli_args_test_selection =",
    ]
    lines += ["    " + test for test in TESTS if os.path.exists(os.path.join(target, test))]
    lines += [
        "pytest_add_cli_args =",
        "    -q",
        "    -p",
        "    no:cacheprovider",
        "    -m",
        "    not slow",
        "    -p",
        "    mutation_numpy_only",
    ]
    with open(os.path.join(target, "setup.cfg"), "w") as stream:
        stream.write("\n".join(lines) + "\n")


def mutmut(target, *arguments):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(target, "scripts"), target]))
    result = subprocess.run(
        [sys.executable, "-m", "mutmut", *arguments], cwd=target, env=env, capture_output=True, text=True
    )
    if result.returncode:  # e.g. the tests fail without any mutant: nothing was measured
        sys.exit("mutmut %s failed in %s:\n%s" % (" ".join(arguments), target, (result.stdout + result.stderr)[-3000:]))
    return result.stdout


def run(module):
    target = os.path.join(ROOT, "out", "mutation", module)
    copy_checkout(target)
    write_config(target, module)
    mutmut(target, "run")
    outcomes = {}
    for line in mutmut(target, "results", "--all", "true").splitlines():
        name, _, outcome = line.strip().rpartition(": ")
        if name:
            outcomes[name] = outcome
    counts = collections.Counter(outcomes.values())
    survivors = sorted(name for name, outcome in outcomes.items() if outcome == "survived")
    with open(os.path.join(target, "survivors.txt"), "w") as stream:
        for name in survivors:
            stream.write(mutmut(target, "show", name) + "\n")
    tested = sum(count for outcome, count in counts.items() if outcome not in ("no tests", "skipped"))
    killed = counts["killed"] + counts["timeout"]
    print(
        "%-11s %s; score %d/%d = %.1f%%"
        % (
            module,
            ", ".join("%s %d" % item for item in sorted(counts.items())),
            killed,
            tested,
            100.0 * killed / max(tested, 1),
        )
    )
    for name in survivors:
        print("  survived: %s" % name)
    return outcomes


if __name__ == "__main__":
    for module in sys.argv[1:] or MODULES:
        run(module)
