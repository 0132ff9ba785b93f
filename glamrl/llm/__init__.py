"""Language models for glamrl: loading, action scoring, value/action heads, LoRA, and the policy built on them."""

from glamrl.llm.heads import ActionHeads, ValueHead
from glamrl.llm.loading import HubUnreachableError, LoadedModel, ModelLoadError, load_model
from glamrl.llm.lora import LoRAConfigError, apply_lora
from glamrl.llm.policy import LLMPolicy, PolicyOutput, PolicyStateError
from glamrl.llm.diagnostics import reference_log_likelihoods
from glamrl.llm.scorer import ActionScorer, Scores, ScoringError

__all__ = [
    "ActionHeads", "ActionScorer", "HubUnreachableError", "LLMPolicy", "LoRAConfigError", "LoadedModel", "ModelLoadError",
    "PolicyOutput", "PolicyStateError", "Scores", "ScoringError", "ValueHead", "apply_lora", "load_model",
    "reference_log_likelihoods",
]
