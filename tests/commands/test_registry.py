"""The commands' registry (`bert_whitening.commands.COMMANDS`): each command declared once, in
its own module, and the command line built from those records alone: its parser, its run, the
output guard (`bert_whitening.cli.check_paths`) and the promise of frozen weights
(`bert_whitening.commands.base.weights_frozen`)."""

import argparse
import dataclasses
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest

from bert_whitening import cli, commands, precision
from bert_whitening.commands import base
from bert_whitening.errors import BertWhiteningError
from bert_whitening.names import PRECISION_VARIABLE

from helpers import with_run

#: Modules of `bert_whitening.commands` that hold no command: what the commands share.
SHARED = {"base", "options", "tasks"}

#: The shortest command line of each command that parses.
SMALLEST = {
    "fit": ["--output", "w.npz", "in.txt"],
    "encode": ["--output", "v.npy", "in.txt"],
    "beam-fit": ["--input", "in.txt", "--output", "w.npz"],
    "beam-encode": ["--input", "in.txt", "--output", "v"],
    "export": ["--output", "served"],
    "eval": ["--task", "STS-B"],
    "eval-retrieval": ["--task", "STS-B"],
    "index": ["--output", "ix", "in.txt"],
    "search": ["--index", "ix", "q"],
    "convert-hf": ["hf", "out"],
    "train": ["--train", "pairs.txt", "--output", "model"],
}


def parsed(name, *more):
    return cli.build_parser().parse_args([name, *SMALLEST[name], *more])


def subcommands(parser=None):
    """``{name: parser}`` of the program's commands (of ``parser``, else a new one), in the order of its help."""
    parser = parser or cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def command_modules():
    """The modules of `bert_whitening.commands` that are commands (each holds one)."""
    names = [info.name for info in pkgutil.iter_modules(commands.__path__) if info.name not in SHARED]
    return [importlib.import_module("bert_whitening.commands." + name) for name in names]


def test_every_command_is_declared_once_in_its_own_module_and_registered():
    names = [command.name for command in commands.COMMANDS]
    assert len(set(names)) == len(names) == len(commands.COMMANDS)
    modules = command_modules()
    assert sorted(module.COMMAND.name for module in modules) == sorted(names)  # none left out of the registry
    for module in modules:
        assert module.__name__.rpartition(".")[2] == module.COMMAND.name.replace("-", "_")
        assert module.COMMAND in commands.COMMANDS
        assert module.COMMAND.run.__module__ == module.COMMAND.add_arguments.__module__ == module.__name__
    assert list(subcommands()) == names  # the help lists them in the registry's order


def test_every_registered_command_has_its_parser_and_its_run():
    program = cli.build_parser()
    found = subcommands(program)
    assert set(SMALLEST) == set(found)  # a new command gets its smallest command line here
    for command in commands.COMMANDS:
        parser = found[command.name]
        assert parser.description == command.description and parser.format_usage().startswith(
            "usage: bert-whitening %s" % command.name
        )
        args = program.parse_args([command.name, *SMALLEST[command.name]])
        assert args.command == command.name and args.command_record is command and args.command_parser is parser
        assert callable(command.run) and command.run.__name__ == "run_" + command.name.replace("-", "_")


def test_each_record_names_only_destinations_its_parser_has():
    """`check_paths` reads a listed input with ``getattr(args, name, None)``: a misspelled one would
    drop that input from the guard without a word."""
    for command in commands.COMMANDS:
        destinations = {action.dest for action in subcommands()[command.name]._actions}
        paths = command.paths
        named = set(paths.outputs) | set(paths.inputs) | set(paths.globs)
        assert named <= destinations, (command.name, named - destinations)
        assert paths.outputs or command.name == "search", command.name  # every other command writes


def test_the_output_guard_is_the_record_s(tmp_path, monkeypatch):
    """An output that is the command's input is refused because the record says which is which:
    with a record that lists neither, the same command line passes the guard."""
    sentences = tmp_path / "in.txt"
    sentences.write_text("a sentence\n", encoding="utf-8")
    argv = ["encode", "--output", str(sentences), str(sentences)]
    with pytest.raises(BertWhiteningError, match="in.txt"):
        cli.check_paths(cli.build_parser().parse_args(argv))
    unguarded = tuple(
        dataclasses.replace(command, paths=base.Paths()) if command.name == "encode" else command
        for command in commands.COMMANDS
    )
    monkeypatch.setattr(commands, "COMMANDS", unguarded)
    cli.check_paths(cli.build_parser().parse_args(argv))


def test_the_frozen_weights_promise_is_the_record_s(monkeypatch):
    """Where bfloat16 runs on a CPU with AMX, a command promises its weights frozen exactly when its
    record says it changes none of the weights it runs; a record saying otherwise is never given
    the promise."""
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: True)
    monkeypatch.delenv(PRECISION_VARIABLE, raising=False)
    for command in commands.COMMANDS:
        args = parsed(command.name)
        args.precision = "bfloat16"  # as if the command had one: train, export, search and convert-hf have none
        assert base.weights_frozen(args) is command.weights_read_only, command.name
        if command.weights_read_only:  # it sets its process's precision, where the promise is made
            assert parsed(command.name, "--precision", "bfloat16").precision == "bfloat16"
            args.command_record = dataclasses.replace(command, weights_read_only=False)
            assert not base.weights_frozen(args), command.name
    read_only = [command.name for command in commands.COMMANDS if command.weights_read_only]
    assert read_only == ["fit", "encode", "eval", "eval-retrieval", "index"]


def test_a_command_runs_its_record_s_run(monkeypatch):
    ran = []
    monkeypatch.setattr(commands, "COMMANDS", with_run("search", ran.append))
    assert cli.main(["search", "--index", "ix", "q"]) == 0
    assert [args.query for args in ran] == [["q"]]


def test_only_the_beam_commands_pass_unknown_options_on():
    passing = [command.name for command in commands.COMMANDS if command.takes_pipeline_options]
    assert passing == ["beam-fit", "beam-encode"]


def test_building_the_parser_imports_none_of_what_the_commands_run_on():
    """The command modules are imported to build the parser (``--help`` included): their runs'
    imports stay inside the runs."""
    code = (
        "import sys; from bert_whitening import cli; cli.build_parser(); "
        "print(sorted({'tensorflow', 'bert4keras', 'scipy', 'faiss', 'apache_beam', 'matplotlib', "
        "'bert_whitening.evaluation', 'bert_whitening.encoding', 'bert_whitening.models'} & set(sys.modules)))"
    )
    environment = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(cli.__file__))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environment)
    assert result.stdout.split() == ["[]"], result.stderr[-2000:]
