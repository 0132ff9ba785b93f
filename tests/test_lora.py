"""LoRA adapters: base frozen, adapters and heads trained; trainable state and checkpoints round-trip."""

import pytest
import torch

from glamrl.run.checkpoint import load_checkpoint, save_checkpoint
from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm import LLMPolicy, PolicyStateError

PROMPTS = ["Goal of the agent: pick up the green key \n Observation 0: You see a wall 1 step right, \n Action 0: "]


def _policy(name: str, **kw) -> LLMPolicy:
    torch.manual_seed(0)
    return LLMPolicy(ModelConfig(name=name, device="cpu", **kw))


def _train_step(policy: LLMPolicy) -> None:
    optimizer = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=0.5)
    out = policy(PROMPTS, ACTION_NAMES)
    (-out.log_probs[:, 2].sum() + out.values.pow(2).sum()).backward()
    optimizer.step()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_lora_trains_adapters_and_heads_only(name):
    policy = _policy(name, lora=True, lora_r=4)
    trainable = policy.trainable_state_dict()
    assert trainable and all("lora_" in k or k.startswith(("value_head", "action_heads")) for k in trainable)
    frozen = {k: p.clone() for k, p in policy.named_parameters() if not p.requires_grad}
    before = {k: v.clone() for k, v in trainable.items()}
    _train_step(policy)
    _train_step(policy)  # lora_B starts at zero: lora_A moves from the second step
    assert all(torch.equal(p, frozen[k]) for k, p in policy.named_parameters() if not p.requires_grad)
    changed = [k for k, v in policy.trainable_state_dict().items() if not torch.equal(v, before[k])]
    assert any("lora_A" in k for k in changed) and any("lora_B" in k for k in changed)
    assert any(k.startswith("value_head") for k in changed)


@pytest.mark.parametrize("lora", [False, True])
def test_save_and_load_round_trip(tmp_path, lora):
    config = ModelConfig(name="tiny-llama", device="cpu", lora=lora, lora_r=4)
    policy = _policy("tiny-llama", lora=lora, lora_r=4)
    _train_step(policy)
    _train_step(policy)
    save_checkpoint(tmp_path / "last.pt", tmp_path / "backup.pt", {"policy": policy.trainable_state_dict()})
    # LoRA: the base comes from the config (same seed, same tiny base); full: everything comes from the file
    torch.manual_seed(0 if lora else 1)
    restored = LLMPolicy(config)
    restored.load_trainable_state_dict(load_checkpoint(tmp_path / "last.pt", tmp_path / "backup.pt")["policy"])
    with torch.no_grad():
        expected, got = policy(PROMPTS, ACTION_NAMES), restored(PROMPTS, ACTION_NAMES)
    torch.testing.assert_close(got.values, expected.values)
    torch.testing.assert_close(got.log_probs, expected.log_probs)


def test_trainable_state_mismatch_is_a_clear_error():
    full, adapted = _policy("tiny-llama"), _policy("tiny-llama", lora=True)
    with pytest.raises(PolicyStateError, match="does not match"):
        adapted.load_trainable_state_dict(full.trainable_state_dict())
