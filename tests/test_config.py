import pytest

from glamrl.config import ConfigError, TrainConfig, load_train_config


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_yaml_and_dotted_overrides(tmp_path):
    path = write(tmp_path, "env:\n  num_envs: 2\nppo:\n  lr: 1e-6\n  num_steps: 8\n  minibatch_size: 4\n")
    cfg = load_train_config(path, ["ppo.lr=1e-5", "model.lora=true", "prompt.nbr_obs=2"])
    assert cfg.env.num_envs == 2 and cfg.ppo.lr == pytest.approx(1e-5)
    assert cfg.model.lora is True and cfg.prompt.nbr_obs == 2
    assert isinstance(cfg.ppo.lr, float)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ppo.lrr=1"], "unknown config key 'ppo.lrr'"),
        (["nope.x=1"], "unknown config key 'nope'"),
        (["env.num_envs=two"], "env.num_envs must be int"),
        (["model.lora=3"], "model.lora must be bool"),
        (["ppo.minibatch_size=1000"], "larger than the rollout batch"),
        (["ppo.grad_accum=3", "ppo.minibatch_size=4"], "multiple of ppo.grad_accum"),
        (["model.dtype=float8"], "model.dtype must be"),
        (["prompt.actions=[a, b]"], "prompt.actions must name the 6 actions"),
        (["ppo.lr"], "must look like section.field=value"),
        (["model.inference_batching=sorted"], "model.inference_batching must be auto, padded, bucketed or null"),
        (["run.sharding=fsdp", "model.batching=padded", "model.inference_batching=bucketed"],
         "model.inference_batching padded, auto or"),
    ],
)
def test_config_errors_name_the_problem(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        given = {o.partition("=")[0] for o in overrides}
        base = [o for o in ("env.num_envs=2", "ppo.num_steps=4", "ppo.minibatch_size=4") if o.partition("=")[0] not in given]
        load_train_config(None, [*base, *overrides])


def test_missing_or_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_train_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_train_config(write(tmp_path, "env: [unclosed"))


@pytest.mark.parametrize("name", ["turn_to_object", "goto_cpu", "glam_paper"])
def test_shipped_configs_load(name):
    cfg = load_train_config(f"configs/{name}.yaml")
    assert isinstance(cfg, TrainConfig)


def test_config_command_prints_every_field_with_its_type_default_and_help(capsys):
    from glamrl.cli import main

    assert main(["config", "drrn"]) == 0
    out = capsys.readouterr().out
    assert "drrn.exploration (str, default 'softmax')\n    how actions are drawn from Q" in out
    assert "drrn.temperature (float, default 1.0)" in out and "ppo.lr" not in out
    assert main(["config"]) == 0
    every = capsys.readouterr().out
    for key in ("env.faithful (bool, default False)", "prompt.actions (list[str]", "env.task (str | None, default None)"):
        assert key in every
    assert main(["config", "nope"]) == 2
    assert "unknown config section 'nope'" in capsys.readouterr().err


def test_every_config_field_has_a_help_text():
    from glamrl.config import field_help

    missing = [f.key for f in field_help() if not f.help]
    assert not missing, f"fields without a docstring under them in glamrl/config.py: {missing}"


def test_rollout_batch_checks_apply_to_kinds_ppo_trains_only():
    """PPO's minibatch must fit its rollout; DRRN collects no rollout, so its configs are not held to that."""
    drrn = load_train_config("configs/drrn.yaml", ["env.num_envs=1"])
    assert drrn.ppo.minibatch_size > drrn.batch_size  # PPO's defaults, unread by the DRRN loop
    with pytest.raises(ConfigError, match="larger than the rollout batch"):
        load_train_config("configs/goto_cpu.yaml", ["env.num_envs=1", "ppo.num_steps=4"])
