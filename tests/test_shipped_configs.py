"""Every preset in configs/ loads, and the loop it is written for reads every field it sets (check_reads): a
preset that a loop would partly ignore, or that names a field no longer there, fails here rather than at a
user's first `glamrl train`."""

from pathlib import Path

import pytest

from glamrl.agents.registry import agent_kind
from glamrl.config import load_train_config
from glamrl.trainers.common import check_reads

SHIPPED = sorted(Path("configs").glob("*.yaml"))
CLONING = {"bc.yaml", "bc_goto_local.yaml"}  # `glamrl bc --config`; every other preset is `glamrl train`'s


def test_the_presets_are_found():
    assert len(SHIPPED) >= 10 and CLONING <= {p.name for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_each_preset_loads_and_its_loop_reads_all_it_sets(path):
    cfg = load_train_config(path, [])
    loop = "bc" if path.name in CLONING else agent_kind(cfg.agent.kind).trainer.name
    check_reads(cfg, loop)


def test_a_cloning_preset_matches_the_ppo_preset_it_warms_up():
    """agent.init_from needs the clone's model and prompt: configs/bc_goto_local.yaml is goto_local_cpu.yaml's."""
    clone, ppo = (load_train_config(Path("configs") / name, []) for name in ("bc_goto_local.yaml", "goto_local_cpu.yaml"))
    assert (clone.model, clone.prompt, clone.env.id) == (ppo.model, ppo.prompt, ppo.env.id)
