"""Tests never reach a model hub: everything they load is built locally or shipped in a wheel."""

import os

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (and do not fight a second process for the cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
