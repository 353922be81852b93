"""One output guard (`bert_whitening.io.atomic.check_outputs`) for every command that writes and
every public writer: an output that is one of the run's inputs by another name, lies in or
around an input directory, is a FIFO or a device, or is another output of the same run, is
refused in one line before any work, and the input is left byte for byte as it was."""

import dataclasses
import hashlib
import os
import re
import shutil

import pytest

from bert_whitening.checkpoints import find_model
from bert_whitening.errors import BertWhiteningError

from helpers import SENTENCES, commands_in_a_fresh_process, here, refused

LINES = [("%s %d" % (SENTENCES[i % len(SENTENCES)], i)).strip() for i in range(40)]


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model, whitened):
    """A directory of inputs: a copy of the tiny model, its whitening, a sentence file, a pair
    task under a data directory, a Hugging Face directory (only its name is read here)."""
    directory = tmp_path_factory.mktemp("outputs")
    model = directory / "model"
    shutil.copytree(tiny_model[0], model)
    sentences = directory / "sentences.txt"
    sentences.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    task = directory / "data" / "T"
    task.mkdir(parents=True)
    pairs = "".join("%s\t%s\t%d\n" % (LINES[i], LINES[-1 - i], i % 2) for i in range(20))
    (task / "T.test.data").write_text(pairs, encoding="utf-8")
    whitening = directory / "w.npz"
    identity = find_model(str(model)).identity("bert")
    dataclasses.replace(whitened.whitening, model_identity=identity).save(str(whitening))
    hf = directory / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}", encoding="utf-8")
    return {
        "dir": directory,
        "model": model,
        "vocab": model / "vocab.txt",
        "config": model / "bert_config.json",
        "sentences": sentences,
        "data_dir": directory / "data",
        "task_file": task / "T.test.data",
        "whitening": whitening,
        "hf": hf,
    }


def tree_digest(path):
    """The bytes of a file, or of every file under a directory with their names."""
    digest = hashlib.sha256()
    paths = [path] if os.path.isfile(path) else sorted(p for p in path.rglob("*") if p.is_file())
    for name in paths:
        digest.update(str(name).encode() + b"\0" + name.read_bytes())
    return digest.hexdigest()


# Each command that writes, as a function of the inputs and of what its (first) output is.
COMMANDS = {
    "fit": lambda w, out: ["fit", "--model", w["model"], "--output", out, w["sentences"]],
    "fit-flow": lambda w, out: ["fit", "--method", "flow", "--model", w["model"], "--output", out, w["sentences"]],
    "encode": lambda w, out: [
        "encode", "--model", w["model"], "--whitening", w["whitening"], "--output", out, w["sentences"]
    ],
    "beam-fit": lambda w, out: ["beam-fit", "--model", w["model"], "--input", w["sentences"], "--output", out],
    "beam-encode": lambda w, out: [
        "beam-encode", "--model", w["model"], "--whitening", w["whitening"], "--input", w["sentences"], "--output", out
    ],
    "export": lambda w, out: ["export", "--model", w["model"], "--whitening", w["whitening"], "--output", out],
    "eval-json": lambda w, out: [
        "eval", "--model", w["model"], "--task", "T", "--data-dir", w["data_dir"], "--fit-on", w["sentences"],
        "--json", out,
    ],
    "eval-plot": lambda w, out: [
        "eval", "--model", w["model"], "--task", "T", "--data-dir", w["data_dir"], "--plot", out
    ],
    "eval-retrieval-json": lambda w, out: [
        "eval-retrieval", "--model", w["model"], "--task", "T", "--data-dir", w["data_dir"],
        "--distractors", w["sentences"], "--json", out,
    ],
    "eval-retrieval-plot": lambda w, out: [
        "eval-retrieval", "--model", w["model"], "--task", "T", "--data-dir", w["data_dir"], "--plot", out
    ],
    "index": lambda w, out: [
        "index", "--model", w["model"], "--whitening", w["whitening"], "--output", out, w["sentences"]
    ],
    "convert-hf": lambda w, out: ["convert-hf", w["hf"], out],
    "train": lambda w, out: ["train", "--model", w["model"], "--train", w["sentences"], "--output", out],
}  # fmt: skip

# (command, the input its output is made equal to): every command that writes, each against
# the inputs it would most likely clobber, a file of the model directory among them.
SAME_AS_AN_INPUT = [
    ("fit", "sentences"),
    ("fit", "vocab"),
    ("fit-flow", "sentences"),
    ("encode", "sentences"),
    ("encode", "whitening"),
    ("encode", "vocab"),
    ("beam-fit", "sentences"),
    ("beam-fit", "config"),
    ("beam-encode", "sentences"),
    ("beam-encode", "whitening"),
    ("export", "model"),
    ("export", "whitening"),
    ("eval-json", "task_file"),
    ("eval-json", "sentences"),
    ("eval-plot", "task_file"),
    ("eval-retrieval-json", "sentences"),
    ("eval-retrieval-plot", "task_file"),
    ("index", "sentences"),
    ("convert-hf", "hf"),
]


def another_name(work, tmp_path, monkeypatch, how, role):
    """The input ``role`` by another name: a symlink to it, or ``./`` and its relative path."""
    if how == "symlink":
        link = tmp_path / ("link-" + role)
        link.symlink_to(work[role])
        return str(link)
    monkeypatch.chdir(work["dir"])
    return os.path.join(".", os.path.relpath(work[role], work["dir"]))


def link_to(tmp_path, target):
    link = tmp_path / ("link-" + target.name)
    if not link.is_symlink():
        link.symlink_to(target)
    return str(link)


def assert_refused_in_one_line(result, *fragments):
    message = refused(result, *fragments)
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr
    return message


@pytest.mark.parametrize("how", ["symlink", "dot-slash"])
@pytest.mark.parametrize("command, role", SAME_AS_AN_INPUT)
def test_an_output_that_is_an_input_by_another_name_is_refused(work, tmp_path, monkeypatch, command, role, how):
    output = another_name(work, tmp_path, monkeypatch, how, role)
    before = tree_digest(work[role])
    result = here(*COMMANDS[command](work, output))
    message = assert_refused_in_one_line(result, "cannot write %s:" % output)
    assert "it is the input" in message or "read from the input directory" in message, message
    assert tree_digest(work[role]) == before


# A new directory inside an input directory: an index in the model, an export base in it, a
# converted model inside the one it converts.
INSIDE_AN_INPUT = [("export", "model"), ("index", "model"), ("convert-hf", "hf")]


@pytest.mark.parametrize("command, role", INSIDE_AN_INPUT)
def test_an_output_directory_inside_an_input_directory_is_refused(work, command, role):
    output = work[role] / "new"
    before = tree_digest(work[role])
    result = here(*COMMANDS[command](work, output))
    assert_refused_in_one_line(result, "cannot write %s: it is inside the input directory" % output)
    assert tree_digest(work[role]) == before and not output.exists()


def test_an_output_directory_around_an_input_directory_is_refused(work, tmp_path):
    """``train --overwrite`` would remove the model directory it trains with."""
    output = tmp_path / "trained"
    shutil.copytree(work["model"], output / "model")
    result = here(*COMMANDS["train"](dict(work, model=output / "model"), output), "--overwrite")
    assert_refused_in_one_line(result, "cannot write %s: it contains the input directory" % output)
    assert sorted(os.listdir(output)) == ["model"]


def test_an_export_base_is_kept_and_may_hold_inputs_but_not_in_the_version_it_writes(tmp_path):
    from bert_whitening.io.atomic import BASE, check_outputs

    base = tmp_path / "base"
    (base / "model").mkdir(parents=True)
    (base / "w.npz").write_bytes(b"whitening")
    assert check_outputs([(str(base), BASE)], [str(base / "model"), str(base / "w.npz")]) == [str(base)]
    with pytest.raises(BertWhiteningError, match="it is inside the input directory"):
        check_outputs([(str(base / "model" / "exports"), BASE)], [str(base / "model")])


def test_a_directory_beside_an_input_directory_is_not_inside_it_and_a_file_deeper_in_one_is_its(tmp_path):
    """``model-tuned`` beside ``model`` shares its name's beginning, not its files; a file an
    input directory holds one directory down (a task of a data directory) is the input's."""
    from bert_whitening.io.atomic import BASE, DIRECTORY, check_outputs

    (tmp_path / "model" / "T").mkdir(parents=True)
    (tmp_path / "model" / "T" / "T.test.data").write_text("pairs", encoding="utf-8")
    for kind in (DIRECTORY, BASE):
        assert check_outputs([(str(tmp_path / "model-tuned"), kind)], [str(tmp_path / "model")])
    (tmp_path / "model-tuned").mkdir()
    (tmp_path / "model-tuned" / "w.npz").write_bytes(b"whitening")
    assert check_outputs([(str(tmp_path / "model"), DIRECTORY)], [str(tmp_path / "model-tuned" / "w.npz")])
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "model" / "T" / "T.test.data")
    with pytest.raises(BertWhiteningError, match="it is .*T.test.data, read from the input directory"):
        check_outputs([str(link)], [str(tmp_path / "model")])
    assert (tmp_path / "model" / "T" / "T.test.data").read_text(encoding="utf-8") == "pairs"


def special(tmp_path, kind):
    if kind == "/dev/null":
        return "/dev/null"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return str(fifo)


@pytest.mark.parametrize("kind, said", [("FIFO", "it is a FIFO"), ("/dev/null", "it is a character device")])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_that_is_a_fifo_or_a_device_is_refused(work, tmp_path, command, kind, said):
    output = special(tmp_path, kind)
    mode = os.stat(output).st_mode
    result = here(*COMMANDS[command](work, output))
    assert_refused_in_one_line(result, "cannot write %s: %s" % (output, said))
    assert os.stat(output).st_mode == mode  # not replaced by a regular file


@pytest.mark.parametrize("output", ["-", ""])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_that_is_standard_output_or_empty_is_refused(work, tmp_path, monkeypatch, command, output):
    """No output goes to standard output: ``--output -`` once made ``index`` write a directory
    named ``-`` and ``encode`` fail with a traceback."""
    monkeypatch.chdir(tmp_path)
    result = here(*COMMANDS[command](work, output))
    assert_refused_in_one_line(result, "cannot write '%s': an output is a file or directory" % output)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("how", ["same name", "symlink"])
@pytest.mark.parametrize("command", ["eval", "eval-retrieval"])
def test_two_outputs_of_one_run_at_one_path_are_refused(work, tmp_path, command, how):
    report = tmp_path / "report"
    plot = report if how == "same name" else tmp_path / "plot.png"
    if how == "symlink":
        plot.symlink_to(report)
    argv = [command, "--model", work["model"], "--task", "T", "--data-dir", work["data_dir"]]
    result = here(*argv, "--json", report, "--plot", plot)
    assert_refused_in_one_line(result, "cannot write %s: it is also the output %s of this run" % (plot, report))
    assert not report.exists()


def test_every_refusal_is_decided_before_tensorflow_is_imported(work, tmp_path):
    """Before any work: a fresh process refuses every case above without importing TensorFlow
    (so no model was loaded, no sentence encoded)."""
    fifo = special(tmp_path, "FIFO")
    cases = [COMMANDS[command](work, link_to(tmp_path, work[role])) for command, role in set(SAME_AS_AN_INPUT)]
    cases += [COMMANDS[command](work, fifo) for command in COMMANDS]
    cases += [COMMANDS[command](work, work[role] / "new") for command, role in INSIDE_AN_INPUT]
    cases.append(COMMANDS["eval-json"](work, tmp_path / "r") + ["--plot", tmp_path / "r"])
    statuses, imported, stderr = commands_in_a_fresh_process(cases)
    assert statuses == [1] * len(cases), stderr
    assert not imported, stderr


def test_every_command_declares_what_it_reads_and_writes():
    """A command cannot be declared without its `Paths`: every registered one has them."""
    from bert_whitening import commands
    from bert_whitening.commands.base import Paths

    assert all(isinstance(command.paths, Paths) for command in commands.COMMANDS)
    writers = {command.name for command in commands.COMMANDS if command.paths.outputs}
    assert writers == {name.split("-json")[0].split("-plot")[0] for name in COMMANDS} - {"fit-flow"}


# --- the public API's writers ------------------------------------------------------------------


def api_writers():
    """Each public writer, called with an output that is one of its inputs (or two outputs at
    one path), and the input that must stay as it was."""

    def encode_file(w, tmp):
        from bert_whitening import SentenceEncoder

        encoder = SentenceEncoder.load(str(w["model"]), whitening=str(w["whitening"]))
        try:
            encoder.encode_file(str(w["sentences"]), link_to(tmp, w["whitening"]))
        finally:
            assert encoder._pooled is None  # refused before the model was built

    def save(w, tmp):
        from bert_whitening import SentenceEncoder

        SentenceEncoder.load(str(w["model"]), whitening=str(w["whitening"])).save(str(w["model"] / "saved"))

    def export(w, tmp):
        from bert_whitening import SentenceEncoder

        SentenceEncoder.load(str(w["model"]), whitening=str(w["whitening"])).export(link_to(tmp, w["model"]))

    def export_saved_model(w, tmp):
        from bert_whitening import SentenceEncoder
        from bert_whitening.export import export_saved_model

        encoder = SentenceEncoder.load(str(w["model"]), whitening=str(w["whitening"])).keras_encoder
        export_saved_model(encoder, link_to(tmp, w["model"]))

    def write_report(w, tmp):
        from bert_whitening.evaluation import write_report

        path = str(tmp / "report")
        write_report({"tasks": {}}, path, path, lambda target: open(target, "w").close())

    def build_index(w, tmp):
        from bert_whitening.config import EncoderConfig
        from bert_whitening.retrieval.search import build_index

        build_index(
            EncoderConfig(model=str(w["model"]), normalize=True), str(w["model"] / "index"), inputs=[w["sentences"]]
        )

    def convert_hf(w, tmp):
        from bert_whitening.checkpoints.convert import convert_hf

        convert_hf(str(w["hf"]), str(w["hf"] / "google"))

    def beam_encode(w, tmp):
        from bert_whitening import beam
        from bert_whitening.config import EncoderConfig

        config = EncoderConfig(model=str(w["model"]), normalize=True)
        beam.encode_on_runner([str(w["sentences"])], config, link_to(tmp, w["sentences"]))

    def beam_fit(w, tmp):
        from bert_whitening import beam
        from bert_whitening.config import EncoderConfig

        beam.fit_on_runner([str(w["sentences"])], EncoderConfig(model=str(w["model"])), link_to(tmp, w["sentences"]))

    def report_over_its_data(w, tmp):
        """A report names what it was made from: a Python caller's ``--json`` cannot replace it."""
        from bert_whitening.evaluation import write_report

        write_report({"data_dir": str(w["data_dir"]), "tasks": {"T": {}}, "fit_on": "all"}, str(w["task_file"]))

    def train(w, tmp):
        from bert_whitening.training import TrainOptions, train

        train(TrainOptions(str(w["task_file"]), str(w["model"] / "fine-tuned"), model=str(w["model"])))

    def whitening_save(w, tmp):
        from bert_whitening.whitening import Whitening

        Whitening.load(str(w["whitening"])).save(special(tmp, "FIFO"))

    return [
        (encode_file, "whitening", "it is the input"),
        (save, "model", "it is inside the input directory"),
        (export, "model", "it is inside the input directory"),  # BASE/1, in the model directory
        (export_saved_model, "model", "it is inside the input directory"),
        (write_report, "dir", "it is also the output"),
        (report_over_its_data, "task_file", "it is the input"),
        (train, "model", "it is inside the input directory"),
        (build_index, "model", "it is inside the input directory"),
        (convert_hf, "hf", "it is inside the input directory"),
        (beam_encode, "sentences", "it is the input"),
        (beam_fit, "sentences", "it is the input"),
        (whitening_save, "dir", "it is a FIFO"),
    ]


@pytest.mark.parametrize("write, role, said", api_writers(), ids=lambda case: getattr(case, "__name__", None))
def test_every_public_writer_goes_through_the_guard(work, tmp_path, write, role, said):
    before = tree_digest(work[role])
    with pytest.raises(BertWhiteningError, match="cannot write .*: %s" % said) as raised:
        write(work, tmp_path)
    assert "\n" not in str(raised.value)
    assert tree_digest(work[role]) == before


def test_a_directory_output_that_holds_an_input_file_is_refused(tmp_path):
    """Replacing it would remove the input: ``export --overwrite`` of BASE/3 deleted the
    whitening it exported, read from BASE/3/w.npz (train --overwrite alike). A base is kept, so
    an input in it is no output's."""
    from bert_whitening.export import target_version
    from bert_whitening.io.atomic import DIRECTORY, check_outputs

    (tmp_path / "base" / "3").mkdir(parents=True)
    inside = tmp_path / "base" / "3" / "w.npz"
    inside.write_bytes(b"whitening")
    with pytest.raises(BertWhiteningError, match=r"^cannot write .*base/3: it holds the input .*base/3/w.npz; choose"):
        target_version(str(tmp_path / "base"), 3, overwrite=True, inputs=[str(inside)])
    with pytest.raises(BertWhiteningError, match="it holds the input"):
        check_outputs([(str(tmp_path / "base"), DIRECTORY)], [str(inside)])  # train --overwrite's check
    assert target_version(str(tmp_path / "base"), inputs=[str(inside)]) == 4  # the base is kept: no refusal
    (tmp_path / "base" / "kept.npz").write_bytes(b"whitening")
    assert target_version(str(tmp_path / "base"), 3, True, [str(tmp_path / "base" / "kept.npz")]) == 3
    assert inside.read_bytes() == b"whitening"


def test_the_built_in_model_is_an_input_too(tmp_path):
    """A link to a file of the installed model package was a writable output."""
    from bert_whitening import cli
    from bert_whitening.checkpoints import builtin_model_dir
    from bert_whitening.config import EncoderConfig

    link = tmp_path / "vocab-link.json"
    link.symlink_to(os.path.join(builtin_model_dir(), "vocab.txt"))
    args = cli.build_parser().parse_args(["eval", "--task", "STS-B", "--json", str(link)])
    with pytest.raises(BertWhiteningError, match="it is .*vocab.txt, read from the input directory .*model"):
        cli.check_paths(args)
    assert builtin_model_dir() in EncoderConfig().read_paths()


@pytest.mark.parametrize("command", ["index", "convert-hf", "save"])
def test_a_directory_output_is_new_unless_overwrite_and_overwrite_replaces_it_whole(
    work, tiny_model, tmp_path, command
):
    """One rule (`atomic.check_output_directory`) for every directory put in place whole: `index`,
    `convert-hf` and `SentenceEncoder.save` had their own "already exists" and no --overwrite,
    as `train` and `export` have. A link is never replaced, even with overwrite."""
    from bert_whitening import SentenceEncoder

    def write(output, *overwrite):
        if command == "save":
            SentenceEncoder.load(str(work["model"])).save(str(output), overwrite=bool(overwrite))
            return 0
        if command == "index":
            return here("index", "--model", work["model"], "--output", output, *overwrite, work["sentences"]).returncode
        return here("convert-hf", "minilm", output, *overwrite).returncode

    output = tmp_path / "out"
    output.mkdir()
    (output / "old.txt").write_text("the old output", encoding="utf-8")
    if command == "save":
        with pytest.raises(
            BertWhiteningError, match=r"out already exists; pass overwrite \(--overwrite\) to replace it"
        ):
            write(output)
    else:
        refused(
            here(
                *(
                    ["index", "--model", work["model"], "--output", output, work["sentences"]]
                    if command == "index"
                    else ["convert-hf", "minilm", output]
                )
            ),
            "out already exists; pass overwrite (--overwrite)",
        )
    assert (output / "old.txt").exists()
    assert write(output, "--overwrite") == 0
    assert not (output / "old.txt").exists() and os.listdir(output)
    link = tmp_path / "link"
    link.symlink_to(output)
    with pytest.raises(BertWhiteningError, match="it is a symbolic link; name the directory itself"):
        from bert_whitening.io.atomic import check_output_directory

        check_output_directory(str(link), overwrite=True)


def test_an_export_version_that_is_a_link_is_not_replaced_even_with_overwrite(tmp_path):
    """`export` kept its own copy of the directory rule, without its refusal of a link: the
    exchange of `--version 3 --overwrite` replaced the link BASE/3 itself."""
    from bert_whitening.export import target_version

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "3").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BertWhiteningError, match="base/3: it is a symbolic link; name the directory itself"):
        target_version(str(tmp_path / "base"), 3, overwrite=True)
    assert target_version(str(tmp_path / "base")) == 4


@pytest.mark.parametrize(
    "output, said",
    [
        (".", "cannot write .: name the directory itself, not . or .."),
        ("sub/.", "cannot write sub/.: name the directory itself, not . or .."),
        ("sub/..", "cannot write sub/..: name the directory itself"),
        ("{here}", "cannot replace {here}: it is the current directory; run from elsewhere"),
        ("{here}/../here", "cannot replace {here}/../here: it is the current directory"),
        ("{parent}", "cannot replace {parent}: it holds the current directory"),
        ("sub/./", "cannot write sub/./: name the directory itself, not . or .."),
    ],
)
def test_overwrite_replaces_neither_a_dot_nor_the_directory_the_run_is_in(tmp_path, monkeypatch, output, said):
    """``train --output . --overwrite`` trained, then failed renaming onto "." (EBUSY), and
    ``--output "$PWD" --overwrite`` replaced the directory the user was in, files and all."""
    from bert_whitening.io.atomic import check_output_directory

    here = tmp_path / "here"
    (here / "sub").mkdir(parents=True)
    (here / "keep.txt").write_text("mine", encoding="utf-8")
    monkeypatch.chdir(here)
    output, said = (text.format(here=here, parent=tmp_path) for text in (output, said))
    with pytest.raises(BertWhiteningError, match="^" + re.escape(said)):
        check_output_directory(output, overwrite=True)
    check_output_directory("sub/", overwrite=True)  # a trailing slash names the directory
    (tmp_path / "he").mkdir()
    check_output_directory(str(tmp_path / "he"), overwrite=True)  # a name the current one begins with


@pytest.mark.parametrize("prefix", ["out/", "out/.", "."])
def test_a_prefix_that_ends_in_a_directory_is_refused(tmp_path, monkeypatch, prefix):
    """``beam-encode --output out/`` wrote ``out/-00000-of-00001.tfrecord``."""
    from bert_whitening.io.atomic import PREFIX, check_outputs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    with pytest.raises(
        BertWhiteningError, match="^cannot write %s: a prefix ends in a name its files begin with" % re.escape(prefix)
    ):
        check_outputs([(prefix, PREFIX)])
    check_outputs([("out/vectors", PREFIX)])
