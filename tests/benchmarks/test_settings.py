"""The runner's settings are declared once (benchmarks/protocol/settings.py): the command
line, RunConfig, Options, TrainConfig, a preset's overrides and the progress key are derived
from the declaration, and the progress files of the committed confirmatory run still match."""

import argparse
import dataclasses
from pathlib import Path

import pytest

from benchmarks.methods import TrainConfig, groups_for
from benchmarks.protocol import settings
from benchmarks.protocol.settings import SETTINGS, Setting, settings_of, with_settings
from benchmarks.runner import arguments
from benchmarks.runner.config import Options, RunConfig, progress_key, train_config
from benchmarks.runner.groups import progress_path
from benchmarks.runner.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]


def _names(cls) -> set:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_declared_setting_is_a_field_where_its_scope_says():
    assert {s.name for s in settings_of("run")} == _names(RunConfig)
    assert {s.name for s in settings_of("invocation")} == _names(Options)
    own = {"num_classes", "eval_batch_size", "mem_size", "slda_shrinkage", "seed", "bn_batches", "head_seed"}
    assert {s.name for s in settings_of("train")} == _names(TrainConfig) - own


def test_every_flag_of_a_setting_is_on_the_command_line_under_its_name():
    parser = arguments.build_parser()
    dests = {action.dest: action for action in parser._actions}
    for setting in SETTINGS:
        if setting.flag_name is None:
            assert setting.name not in dests, setting.name
            continue
        assert setting.flag_name in dests[setting.name].option_strings, setting.name
        assert dests[setting.name].help == setting.help


def test_train_config_takes_every_training_setting_from_the_run_and_the_options():
    run = RunConfig.from_dict(dict(PRESETS["offline"][0], epochs=3, lr=0.2, beta=7.0, milestones=[2],
                                   tme_beta=4.0, projection_dim=16, decay=1e-5))
    options = Options(device="cpu", amp="bf16")
    cfg = train_config(run, options, num_classes=9, seed=4)
    for setting in settings_of("train"):
        source = run if setting.scope == "run" else options
        assert getattr(cfg, setting.name) == getattr(source, setting.name), setting.name
    assert (cfg.num_classes, cfg.seed, cfg.epochs, cfg.beta, cfg.amp) == (9, 4, 3, 7.0, "bf16")


def _throwaway(**kw) -> Setting:
    return Setting("warmup_epochs", int, "epochs of warm-up (a throwaway setting of this test)", default=0,
                   argument=dict(type=int), key="unless_default", **kw)


def test_a_new_setting_is_one_entry(monkeypatch):
    """One entry makes a flag, a RunConfig and TrainConfig field, a preset override that
    drops tuned values, and a progress key entry only away from its default."""
    new = _throwaway(trains=True, untunes=True)
    monkeypatch.setattr(settings, "SETTINGS", SETTINGS + (new,))
    monkeypatch.setattr(arguments, "SETTINGS", settings.SETTINGS)

    args = arguments.build_parser().parse_args(["--warmup-epochs", "3"])
    assert args.warmup_epochs == 3
    assert "warmup_epochs" in settings.overriding_names() and "warmup_epochs" in settings.untuning_names()

    @with_settings("run", frozen=True)
    class Run:
        pass

    @with_settings("train")
    class Train:
        num_classes: int

    assert Run.__dataclass_fields__["warmup_epochs"].default == 0
    assert Train(num_classes=2, warmup_epochs=5).warmup_epochs == 5
    assert new.in_key(3) and not new.in_key(0)  # folders written before the setting existed still resume


def test_a_class_cannot_redeclare_a_setting():
    with pytest.raises(TypeError, match="is a declared setting"):
        @with_settings("train")
        class Train:
            num_classes: int
            epochs: int = 3


def test_the_settings_scope_is_checked():
    with pytest.raises(ValueError, match="scope must be one of"):
        settings_of("everything")


def test_the_committed_confirmatory_run_still_resumes():
    """Every progress file of docs/results/offline-confirm is named by the current code's key
    (settings declared once must not rename what an earlier version kept)."""
    progress = ROOT / "docs/results/offline-confirm/progress"
    kept = {p.name for p in progress.glob("*.json")}
    assert len(kept) >= 100
    args = arguments.parse_args(["--preset", "offline-confirm", "--device", "cpu", "--jobs", "2"])
    runs, options = arguments.resolve(args)
    names = set()
    for run in runs:
        task_run = run.replace(scenario="task", task_il=False) if run.task_il else None
        for group, _ in groups_for(list(run.methods)):
            for piece_run in [run] + ([task_run] if task_run is not None and group.task_aware else []):
                for seed in run.seeds:
                    names.add(Path(progress_path(str(progress), progress_key(piece_run, options, seed), group)).name)
    assert kept <= names, sorted(kept - names)[:5]


def test_flags_keep_their_bounds():
    parser = arguments.build_parser()
    for argv in (["--epochs", "0"], ["--milestones", "3,2"], ["--projection-dim", "0"], ["--beta", "nan"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
    assert isinstance(parser, argparse.ArgumentParser)
