"""One configuration vocabulary: `gradcraft train --config run.toml|json` (flags override it; a bad
file is one error line naming the file and the key), the train flags generated from the ModelConfig
and TrainConfig fields, and library errors naming fields (the CLI spells them as flags)."""

import json

import pytest

from gradcraft.cli.main import main
from gradcraft.errors import ConfigError
from gradcraft.models.config import ModelConfig
from gradcraft.training.config import TrainConfig, read_settings_file

TOML = """\
preset = "toy-v0"
[model]
dim = 32
n_heads = 2
n_layers = 2
seq_len = 16
[train]
steps = 2
batch_size = 4
warmup_steps = 1
max_lr = 3e-3
checkpoint_every = 2
progress = false
"""


def train(*argv):
    return main(["train", *map(str, argv)])


def saved(folder, name):
    return json.loads((folder / name).read_text())


def test_config_file_alone_trains_and_flags_override_it(dataset, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(TOML + f'dataset = "{dataset}"\nmodel_dir = "{tmp_path / "a"}"\n')
    assert train("--config", config) == 0
    model, run = saved(tmp_path / "a", "gradcraft_config.json"), saved(tmp_path / "a", "train_config.json")
    assert (model["dim"], model["n_heads"], model["n_layers"], model["seq_len"]) == (32, 2, 2, 16)
    assert (run["steps"], run["batch_size"], run["max_lr"], run["dataset"]) == (2, 4, 3e-3, str(dataset))
    # flags (any spelling) win over the file, which wins over the preset
    assert (
        train("--config", config, "--model_dir", tmp_path / "b", "--steps", 3, "--num_heads", 4, "--max-lr", "1e-3")
        == 0
    )
    model, run = saved(tmp_path / "b", "gradcraft_config.json"), saved(tmp_path / "b", "train_config.json")
    assert (model["n_heads"], model["dim"], run["steps"], run["max_lr"]) == (4, 32, 3, 1e-3)


def test_a_runs_saved_train_config_is_a_config_file(dataset, tmp_path):
    assert (
        train(
            "--dataset",
            dataset,
            "--model_dir",
            tmp_path / "a",
            "--preset",
            "toy-v0",
            "--dim",
            32,
            "--n_heads",
            2,
            "--n_layers",
            2,
            "--seq_len",
            16,
            "--steps",
            2,
            "--batch_size",
            4,
            "--label_smoothing",
            0.1,
            "--sampling",
            "sequential",
            "--no_progress",
        )
        == 0
    )
    first = saved(tmp_path / "a", "train_config.json")
    model = {k: v for k, v in saved(tmp_path / "a", "gradcraft_config.json").items() if k != "extra"}
    (tmp_path / "model.json").write_text(json.dumps({"model": model, "train": first}))
    assert (
        train(
            "--config",
            tmp_path / "a" / "train_config.json",
            "--model_dir",
            tmp_path / "b",
            "--preset",
            "toy-v0",
            "--dim",
            32,
            "--n_heads",
            2,
            "--n_layers",
            2,
            "--seq_len",
            16,
        )
        == 0
    )
    assert saved(tmp_path / "b", "train_config.json") == {**first, "model_dir": str(tmp_path / "b")}
    # both saved files in one JSON settings file: the same run again
    assert train("--config", tmp_path / "model.json", "--model_dir", tmp_path / "c") == 0
    assert saved(tmp_path / "c", "train_config.json") == {**first, "model_dir": str(tmp_path / "c")}
    assert saved(tmp_path / "c", "gradcraft_config.json")["dim"] == 32


@pytest.mark.parametrize(
    "text,needles",
    [
        ("[train]\nstepz = 3\n", ["run.toml [train]", "unknown field 'stepz'"]),
        ("steps = 3\nflavour = 1\n", ["run.toml", "unknown field 'flavour'"]),
        ("[model]\nsteps = 3\n", ["run.toml [model]", "unknown field 'steps'"]),
        ('[train]\nsteps = "many"\n', ["field 'steps' must be an integer >= 1", '"many"']),
        ("[model]\nn_heads = 0\n", ["field 'n_heads' must be an integer >= 1, got 0"]),
        ("[model]\ndropout = 1.0\n", ["field 'dropout' must be a number in [0, 1)"]),
        ('[train]\nsampling = "zigzag"\n', ["field 'sampling' must be one of random, sequential"]),
        ('[train]\ndecay_embeddings = "yes"\n', ["field 'decay_embeddings' must be true or false"]),
        ("[train\nsteps = 3\n", ["run.toml is not valid TOML"]),
    ],
)
def test_a_bad_config_file_is_one_error_line(tmp_path, dataset, capsys, text, needles):
    config = tmp_path / "run.toml"
    config.write_text(text)
    assert train("--config", config, "--dataset", dataset, "--model_dir", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert all(needle in err for needle in needles), err
    assert not (tmp_path / "run").exists()


def test_bad_json_and_missing_config_files(tmp_path, capsys):
    (tmp_path / "run.json").write_text('{"train": {"max_lr": -1}}')
    assert train("--config", tmp_path / "run.json") == 2
    assert "run.json [train]: field 'max_lr' must be a number > 0, got -1" in capsys.readouterr().err
    (tmp_path / "list.json").write_text("[1, 2]")
    assert train("--config", tmp_path / "list.json") == 2
    assert "list.json: must hold a JSON object" in capsys.readouterr().err
    assert train("--config", tmp_path / "nope.toml") == 2
    assert "nope.toml does not exist" in capsys.readouterr().err


def test_library_errors_name_fields_and_the_cli_names_flags(dataset, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"^invalid model config: dim 30 is not divisible by n_heads 4$"):
        ModelConfig(dim=30, n_heads=4)
    with pytest.raises(ConfigError, match=r"^invalid model config: n_heads must be an integer >= 1, got 0$"):
        ModelConfig(n_heads=0)
    with pytest.raises(ConfigError, match=r"^target_batch 6 is not a multiple of batch_size 4$"):
        TrainConfig(dataset="d", model_dir="m", batch_size=4, target_batch=6).validate()
    with pytest.raises(ConfigError, match=r"^max_lr must be a number > 0, got -1"):
        TrainConfig(dataset="d", model_dir="m", max_lr=-1).validate()
    # the command line names the flag as it was written, or the file that set it
    assert train("--dataset", dataset, "--model_dir", tmp_path / "r", "--embed_dim", 30, "--num_heads", 4) == 2
    assert "--embed_dim 30 is not divisible by --num_heads 4" in capsys.readouterr().err
    (tmp_path / "run.toml").write_text("[model]\ndim = 30\nn_heads = 4\n")
    assert train("--config", tmp_path / "run.toml", "--dataset", dataset, "--model_dir", tmp_path / "r") == 2
    assert f"dim (in {tmp_path / 'run.toml'}) 30 is not divisible" in capsys.readouterr().err


def test_every_field_has_help_and_a_flag_or_a_reason(tmp_path):
    """The flags are the fields: each has help text, and ranges come from the metadata only."""
    import dataclasses
    from gradcraft.cli.main import build_parser

    sub = build_parser().subcommands["train"]
    dests = {a.dest for a in sub._actions}
    for cls in (ModelConfig, TrainConfig):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
            assert f.name in dests or f.name in ("extra", "progress", "nnodes", "dataset", "model_dir"), f.name
    (tmp_path / "flat.json").write_text(json.dumps({"steps": 5, "n_heads": 2, "preset": "demo"}))
    model, train_values = read_settings_file(str(tmp_path / "flat.json"))
    assert model == {"n_heads": 2, "preset": "demo"} and train_values == {"steps": 5}
