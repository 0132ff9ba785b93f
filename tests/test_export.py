"""`glamrl export`: trained tiny runs exported, loaded back by plain transformers/peft in a fresh process and by glamrl."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from glamrl.cli import main
from glamrl.config import ModelConfig, load_train_config
from glamrl.envs.actions import ACTION_NAMES
from glamrl.envs.factory import make_env
from glamrl.agents.factory import restore_model
from glamrl.export import export_run
from glamrl.llm.exported import HEADS_FILE, MANIFEST_FILE, read_manifest
from glamrl.llm.policy import LLMPolicy, PolicyStateError
from glamrl.prompts import PromptHistory
from glamrl.run.dir import RunDir
from glamrl.trainers.ppo import train_ppo

TINY = [
    "env.id=BabyAI-TurnToObject-v0", "env.num_envs=4", "env.seed=3", "model.device=cpu",
    "ppo.num_steps=4", "ppo.minibatch_size=8", "ppo.epochs=2", "ppo.lr=1e-2", "ppo.total_frames=32",
    "run.tensorboard=false", "prompt.nbr_obs=2",
]
RUNS = {  # name: overrides of a 2-update PPO run
    "llama-full": ["model.name=tiny-llama", "model.normalize_by_length=true"],
    "llama-lora": ["model.name=tiny-llama", "model.lora=true"],
    "t5-full": ["model.name=tiny-t5"],
    "t5-lora": ["model.name=tiny-t5", "model.lora=true", "model.normalize_by_length=true"],
}
EXPORTS = {"llama-full": ("llama-full", False), "llama-lora": ("llama-lora", False),
           "llama-merged": ("llama-lora", True), "t5-full": ("t5-full", False), "t5-lora": ("t5-lora", False)}

# Runs in a fresh interpreter where any glamrl import fails: plain transformers + peft + safetensors only.
PLAIN_READER = r'''
import json, os, sys
sys.modules["glamrl"] = None
import torch
torch.set_num_threads(1)
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

def load(directory):
    manifest = json.load(open(f"{directory}/glamrl_heads.json"))
    auto = AutoModelForSeq2SeqLM if manifest["architecture"] == "seq2seq" else AutoModelForCausalLM
    if manifest["weights"] == "adapter":
        from peft import PeftModel
        base = json.load(open(f"{directory}/adapter_config.json"))["base_model_name_or_path"]
        beside = os.path.join(directory, base)  # a base copied into the export is named relative to it
        base = beside if os.path.isdir(beside) else base
        model = PeftModel.from_pretrained(auto.from_pretrained(base), directory)
    else:
        model = auto.from_pretrained(directory)
    return manifest, model.eval(), AutoTokenizer.from_pretrained(directory)

def mlp(layers, tensors):
    modules = []
    for layer in layers:
        if layer["type"] == "sigmoid":
            modules.append(torch.nn.Sigmoid())
            continue
        weight = tensors[layer["weight"]]
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
        linear.load_state_dict({"weight": weight, "bias": tensors[layer["bias"]]})
        modules.append(linear)
    return torch.nn.Sequential(*modules)

def score(manifest, model, tokenizer, prompt, action):
    """log p(action tokens | prompt) and the hidden state the heads read."""
    if manifest["architecture"] == "causal":
        prompt_ids = tokenizer(prompt[:-1] if prompt.endswith(" ") else prompt).input_ids
        context = tokenizer("Action:", add_special_tokens=False).input_ids
        action_ids = tokenizer("Action: " + action, add_special_tokens=False).input_ids[len(context):]
        out = model(input_ids=torch.tensor([prompt_ids + action_ids]), output_hidden_states=True)
        log_probs = out.logits[0].float().log_softmax(-1)[len(prompt_ids) - 1:]
        hidden = out.hidden_states[-1][0, len(prompt_ids) - 1]
    else:
        action_ids = tokenizer(action, add_special_tokens=False).input_ids
        decoder = torch.tensor([[model.config.decoder_start_token_id, *action_ids[:-1]]])
        out = model(**tokenizer(prompt, return_tensors="pt"), decoder_input_ids=decoder, output_hidden_states=True)
        log_probs = out.logits[0].float().log_softmax(-1)
        hidden = out.decoder_hidden_states[-1][0, 0]
    ll = sum(log_probs[i, t].item() for i, t in enumerate(action_ids))
    return (ll / len(action_ids) if manifest["normalize_by_length"] else ll), hidden

request = json.load(sys.stdin)
results = {}
with torch.no_grad():
    for directory in request["dirs"]:
        manifest, model, tokenizer = load(directory)
        value_head = mlp(manifest["value_head"], load_file(f"{directory}/glamrl_heads.safetensors"))
        rows, values = [], []
        for prompt in request["prompts"]:
            scored = [score(manifest, model, tokenizer, prompt, a) for a in manifest["action_names"]]
            rows.append([ll for ll, _ in scored])
            values.append(value_head(scored[0][1].float()).item())
        results[directory] = {"log_likelihoods": rows, "values": values}
assert not any(name.startswith("glamrl") and sys.modules[name] is not None for name in sys.modules)
print(json.dumps(results))
'''


pytestmark = pytest.mark.usefixtures("one_thread")


def some_prompts(actions, nbr_obs):
    """Real prompts: first observations of a few episodes, one with a past observation and action."""
    env = make_env("BabyAI-TurnToObject-v0")
    prompts = []
    for seed in (11, 12, 13):
        obs, _ = env.reset(seed=seed)
        history = PromptHistory(nbr_obs)
        prompts.append(history.prompt(actions, obs["mission"], obs["descriptions"]))
        history.record(obs["descriptions"], actions[2])
        prompts.append(history.prompt(actions, obs["mission"], obs["descriptions"]))
    return prompts


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Four trained runs and five exports of them: {export name: (run dir, export dir)}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("export")
    for name, overrides in RUNS.items():
        train_ppo(load_train_config(None, [*TINY, *overrides]), root / name, progress=False, say=lambda _: None)
    dirs = {}
    for name, (run, merge) in EXPORTS.items():
        if name == "llama-lora":  # once through the command line
            assert main(["export", "--run", str(root / run), "--out", str(root / "out" / name)]) == 0
        else:
            export_run(root / run, root / "out" / name, merge_lora=merge)
        dirs[name] = (root / run, root / "out" / name)
    torch.set_num_threads(threads)
    return dirs


def run_outputs(run_dir, prompts):
    cfg, policy, _ = restore_model(run_dir, device="cpu")
    with torch.no_grad():
        out = policy(prompts, cfg.prompt.actions)
    return out.action_log_likelihoods, out.values


def test_exports_have_the_expected_files(exported):
    for name, (_, out) in exported.items():
        manifest = read_manifest(out)
        assert manifest.weights == {"llama-lora": "adapter", "t5-lora": "adapter", "llama-merged": "merged"}.get(
            name, "full")
        weights = {"adapter_model.safetensors"} if manifest.weights == "adapter" else {"model.safetensors"}
        assert weights | {"tokenizer.json", HEADS_FILE, MANIFEST_FILE, "README.md"} <= {p.name for p in out.iterdir()}
        assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
        assert set(load_file(out / HEADS_FILE)) == {f"value_head.mlp.{i}.{w}" for i in (0, 2, 4)
                                                    for w in ("weight", "bias")}


def test_plain_transformers_in_a_fresh_process_reproduces_the_runs_scores(exported):
    actions = read_manifest(exported["llama-full"][1]).action_names
    prompts = some_prompts(actions, nbr_obs=2)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    request = json.dumps({"dirs": [str(out) for _, out in exported.values()], "prompts": prompts})
    done = subprocess.run([sys.executable, "-c", PLAIN_READER], input=request, capture_output=True, text=True,
                          timeout=300, env=env, cwd=Path(exported["llama-full"][1]).parent)
    assert done.returncode == 0, done.stderr
    plain = json.loads(done.stdout.splitlines()[-1])
    for name, (run_dir, out) in exported.items():
        ll, values = run_outputs(run_dir, prompts)
        torch.testing.assert_close(torch.tensor(plain[str(out)]["log_likelihoods"]), ll, atol=1e-5, rtol=0,
                                   msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(torch.tensor(plain[str(out)]["values"]), values, atol=1e-5, rtol=0,
                                   msg=lambda m: f"{name}: {m}")


def test_training_changed_what_was_exported(exported):
    run_dir, _ = exported["llama-lora"]
    prompts = some_prompts(read_manifest(exported["llama-lora"][1]).action_names, nbr_obs=2)
    cfg, policy, _ = restore_model(run_dir, device="cpu")
    torch.manual_seed(cfg.env.seed)
    fresh = LLMPolicy(cfg.model)
    with torch.no_grad():
        assert (fresh(prompts, ACTION_NAMES).action_log_likelihoods - policy(prompts, ACTION_NAMES).action_log_likelihoods).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["llama-lora", "t5-full"])
def test_glamrl_loads_an_export_with_its_value_head(exported, name):
    run_dir, out = exported[name]
    prompts = some_prompts(read_manifest(out).action_names, nbr_obs=2)
    manifest = read_manifest(out)
    policy = LLMPolicy(ModelConfig(name=str(out), device="cpu", normalize_by_length=manifest.normalize_by_length))
    with torch.no_grad():
        loaded = policy(prompts, manifest.action_names)
    ll, values = run_outputs(run_dir, prompts)
    torch.testing.assert_close(loaded.action_log_likelihoods, ll, atol=1e-5, rtol=0)
    torch.testing.assert_close(loaded.values, values, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["llama-lora", "t5-full"])
def test_eval_of_the_export_matches_eval_of_the_run(exported, name, tmp_path, capsys):
    run_dir, out = exported[name]
    common = ["eval", "--agent", "llm", "--env", "BabyAI-TurnToObject-v0", "--episodes", "24", "--seed", "5",
              "--device", "cpu", "--greedy"]
    assert main([*common, "--run", str(run_dir), "--out", str(tmp_path / "run.json")]) == 0
    assert main([*common, "--model", str(out), "--out", str(tmp_path / "export.json")]) == 0
    from_run, from_export = (json.loads((tmp_path / f).read_text()) for f in ("run.json", "export.json"))
    for key in ("success_rate", "mean_return", "per_task"):
        assert from_export[key] == from_run[key]


def test_a_run_continues_from_an_export(exported, tmp_path):
    _, out = exported["llama-lora"]
    cfg = load_train_config(None, [*TINY, f"model.name={out}", "model.lora=true"])
    torch.manual_seed(0)
    policy = LLMPolicy(cfg.model)
    heads = load_file(out / HEADS_FILE)
    assert torch.equal(policy.value_head.mlp[0].weight, heads["value_head.mlp.0.weight"])
    result = train_ppo(cfg, tmp_path / "continued", progress=False, say=lambda _: None)
    assert result.log_rows == 2 and (tmp_path / "continued" / "checkpoints" / "last.pt").exists()


def test_model_card_describes_the_run(exported):
    run_dir, out = exported["llama-lora"]
    card = (out / "README.md").read_text()
    progress = restore_model(run_dir, device="cpu")[2].progress
    assert f"{progress.log_rows} PPO updates, {progress.frames} frames" in card
    assert "BabyAI-TurnToObject-v0" in card and "Possible action of the agent: turn left" in card
    assert "PeftModel.from_pretrained" in card and "lora: true" in card


def test_overwrite_replaces_an_old_export(exported, tmp_path, capsys):
    run_dir, _ = exported["t5-full"]
    out = tmp_path / "out"
    out.mkdir()
    assert main(["export", "--run", str(run_dir), "--out", str(out)]) == 0  # an empty directory is fine
    (out / "old.txt").write_text("old")
    assert main(["export", "--run", str(run_dir), "--out", str(out), "--overwrite"]) == 0
    assert not (out / "old.txt").exists() and (out / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("case", ["no checkpoint", "unwritable", "not empty", "merge without lora"])
def test_export_errors_are_one_line_before_any_write(exported, tmp_path, capsys, case):
    run_dir, _ = exported["t5-full"]
    out = tmp_path / "out"
    if case == "no checkpoint":
        run_dir = tmp_path / "fresh-run"
        run_dir.mkdir()
        RunDir(run_dir).write_config(load_train_config(None, TINY))
    elif case == "unwritable":
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "out"
    elif case == "not empty":
        out.mkdir()
        (out / "keep.txt").write_text("keep")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = ["export", "--run", str(run_dir), "--out", str(out)]
    assert main([*args, "--merge-lora"] if case == "merge without lora" else args) == 2
    err = capsys.readouterr().err
    assert err.startswith("glamrl: error: ") and len(err.strip().splitlines()) == 1, err
    assert {"no checkpoint": "no checkpoint", "unwritable": "is a file, not a directory",
            "not empty": "--overwrite", "merge without lora": "LoRA runs"}[case] in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_npae_action_heads_travel_with_the_export(tmp_path):
    npae = ["model.name=tiny-llama", "model.pretrained=false", "model.use_action_heads=true"]
    cfg = load_train_config(None, [*(o for o in TINY if not o.startswith("ppo.total_frames")), *npae, "ppo.total_frames=16"])
    train_ppo(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    export_run(tmp_path / "run", tmp_path / "out")
    assert "action_heads.mlp.4.weight" in load_file(tmp_path / "out" / HEADS_FILE)
    prompts = some_prompts(cfg.prompt.actions, nbr_obs=2)
    policy = LLMPolicy(ModelConfig(name=str(tmp_path / "out"), device="cpu", use_action_heads=True))
    with torch.no_grad():
        loaded, trained = policy(prompts, ACTION_NAMES), restore_model(tmp_path / "run", device="cpu")[1](prompts, ACTION_NAMES)
    torch.testing.assert_close(loaded.log_probs, trained.log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(loaded.values, trained.values, atol=1e-5, rtol=0)
    with pytest.raises(PolicyStateError, match="use_action_heads=true"):
        LLMPolicy(ModelConfig(name=str(tmp_path / "out"), device="cpu"))


def test_an_export_scores_as_its_run_did(tmp_path):
    """model.score travels with the export: `glamrl eval --model OUT` scores with GLAM's sum_logits if the run did."""
    from glamrl.eval.agents import AgentSpec, load_eval_model

    cfg = load_train_config(None, [*(o for o in TINY if not o.startswith("ppo.total_frames")), "model.name=tiny-llama",
                                   "model.score=sum_logits", "ppo.total_frames=16"])
    train_ppo(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    assert export_run(tmp_path / "run", tmp_path / "out").score == "sum_logits"
    assert "model.score=sum_logits" in (tmp_path / "out" / "README.md").read_text()
    loaded, model, _, _ = load_eval_model(AgentSpec(kind="llm", model=str(tmp_path / "out"), device="cpu"))
    prompts = some_prompts(cfg.prompt.actions, nbr_obs=2)
    with torch.no_grad():
        trained = restore_model(tmp_path / "run", device="cpu")[1](prompts, ACTION_NAMES)
        torch.testing.assert_close(model(prompts, ACTION_NAMES).log_probs, trained.log_probs, atol=1e-5, rtol=0)
    assert loaded.model.score == "sum_logits"


def test_model_card_lists_the_evaluations_saved_in_the_run(exported, tmp_path, capsys):
    run_dir, _ = exported["llama-full"]
    assert main(["eval", "--agent", "llm", "--run", str(run_dir), "--env", "BabyAI-TurnToObject-v0",
                 "--episodes", "8", "--device", "cpu", "--out", str(run_dir / "eval.json")]) == 0
    rate = json.loads((run_dir / "eval.json").read_text())["success_rate"]
    export_run(run_dir, tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"| eval.json | BabyAI-TurnToObject-v0 | 8 | {rate:.3f} |" in card


# Plain peft in a fresh process, in the moved export: AutoPeftModel finds the base by the adapter's own reference.
MOVED_READER = r'''
import sys
sys.modules["glamrl"] = None
import torch
torch.set_num_threads(1)
from peft import AutoPeftModelForCausalLM, PeftModel
from transformers import AutoModelForCausalLM

ids = torch.tensor([[1, 5, 9, 2, 7]])
with torch.no_grad():
    auto = AutoPeftModelForCausalLM.from_pretrained(".").eval()(ids).logits
    base = AutoModelForCausalLM.from_pretrained("base").eval()
    plain = base(ids).logits
    peft = PeftModel.from_pretrained(base, ".").eval()(ids).logits
print(torch.allclose(auto, peft), torch.allclose(auto, plain))
'''


def test_a_moved_lora_export_loads_with_plain_peft(exported, tmp_path):
    run, _ = exported["llama-lora"]
    export_run(run, tmp_path / "first")
    moved = (tmp_path / "first").rename(tmp_path / "elsewhere")
    assert not Path(json.loads((moved / "adapter_config.json").read_text())["base_model_name_or_path"]).is_absolute()
    out = subprocess.run([sys.executable, "-c", MOVED_READER], cwd=moved, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]  # the adapter applied to the base beside it
