"""Tests never reach a model hub: everything they load is built locally or shipped in a wheel."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
