"""The command line's parser (avalanche_tmc.cli.parser): its commands are found, not listed."""

import importlib
import sys

from avalanche_tmc.cli.parser import COMMANDS, build_parser, command_modules


def test_every_command_module_is_found_in_help_order():
    assert list(COMMANDS) == ["train-component", "compose", "forget", "inspect", "evaluate"]
    assert all(module.NAME == name for name, module in COMMANDS.items())
    listed = [line.split()[0] for line in build_parser().format_help().splitlines() if line.startswith("    ")
              and not line.startswith("     ")]
    assert listed == list(COMMANDS)


def test_a_new_command_is_one_new_module(tmp_path, monkeypatch):
    """A module with NAME, POSITION, register and run, dropped into the package, is a command
    (help lists it at its position; nothing else is edited)."""
    package = importlib.import_module("avalanche_tmc.cli")
    (tmp_path / "hello.py").write_text(
        'NAME = "hello"\nPOSITION = 15\n\n'
        'def register(commands):\n    commands.add_parser(NAME, help="say hello")\n\n'
        'def run(args):\n    print("hello")\n    return 0\n')
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    try:
        found = command_modules()
        assert list(found) == ["train-component", "hello", "compose", "forget", "inspect", "evaluate"]
        assert found["hello"].run(None) == 0
    finally:
        sys.modules.pop("avalanche_tmc.cli.hello", None)
