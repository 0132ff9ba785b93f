"""A uniform replay memory of encoded transitions, preallocated, checkpointable."""

from __future__ import annotations

import torch


class ReplayMemory:
    """The last `capacity` transitions (o, a, r, o', terminated) with o, o' as (L,) token ids."""

    def __init__(self, capacity: int, obs_len: int) -> None:
        self.capacity = capacity
        self.obs = torch.zeros(capacity, obs_len, dtype=torch.int16)
        self.next_obs = torch.zeros(capacity, obs_len, dtype=torch.int16)
        self.actions = torch.zeros(capacity, dtype=torch.long)
        self.rewards = torch.zeros(capacity)
        self.terminated = torch.zeros(capacity, dtype=torch.bool)
        self.size, self.pos = 0, 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor) -> None:
        """Store N transitions: obs, next_obs (N, L); actions, rewards, terminated (N,)."""
        idx = (self.pos + torch.arange(len(actions))) % self.capacity                # (N,)
        self.obs[idx], self.next_obs[idx] = obs.to(torch.int16), next_obs.to(torch.int16)
        self.actions[idx], self.rewards[idx], self.terminated[idx] = actions, rewards, terminated
        self.pos = int(idx[-1] + 1) % self.capacity
        self.size = min(self.size + len(actions), self.capacity)

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """A uniform draw (torch's global RNG) of (obs, actions, rewards, next_obs, terminated)."""
        idx = torch.randint(0, self.size, (batch_size,))
        return (self.obs[idx].long(), self.actions[idx], self.rewards[idx], self.next_obs[idx].long(),
                self.terminated[idx])

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        return {"obs": self.obs[: self.size], "next_obs": self.next_obs[: self.size],
                "actions": self.actions[: self.size], "rewards": self.rewards[: self.size],
                "terminated": self.terminated[: self.size], "size": self.size, "pos": self.pos}

    def load_state_dict(self, state: dict[str, torch.Tensor | int]) -> None:
        n = state["size"]
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, name)[:n] = state[name]
        self.size, self.pos = n, state["pos"]
