"""A uniform replay memory of encoded transitions, checkpointable; its storage grows with what it holds."""

from __future__ import annotations

import torch


FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated")
MIN_ROWS = 4096  # the first allocation, in transitions


class ReplayMemory:
    """The last `capacity` transitions (o, a, r, o', terminated) with o, o' as (L,) token ids.

    Token ids are stored as int16 (ids below 32768): 4 L bytes per transition for o and o', 4.1 kB at
    L = 512, so 3.1 GB for GLAM's 1.5M frames (int64 would take 12.3 GB). The storage starts small and
    doubles up to `capacity` as transitions arrive, so a short run with a large capacity stays small.
    """

    def __init__(self, capacity: int, obs_len: int) -> None:
        self.capacity = capacity
        self.obs = torch.zeros(0, obs_len, dtype=torch.int16)
        self.next_obs = torch.zeros(0, obs_len, dtype=torch.int16)
        self.actions = torch.zeros(0, dtype=torch.long)
        self.rewards = torch.zeros(0)
        self.terminated = torch.zeros(0, dtype=torch.bool)
        self.size, self.pos = 0, 0

    def _reserve(self, rows: int) -> None:
        """Room for `rows` transitions (at most `capacity`): the storage doubles until it has it."""
        have = len(self.actions)
        if rows <= have:
            return
        new = min(self.capacity, max(rows, 2 * have, MIN_ROWS))
        for name in FIELDS:
            old = getattr(self, name)
            grown = old.new_zeros((new, *old.shape[1:]))
            grown[:have] = old
            setattr(self, name, grown)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor) -> None:
        """Store N transitions: obs, next_obs (N, L); actions, rewards, terminated (N,)."""
        if obs.numel() and max(int(obs.max()), int(next_obs.max())) > torch.iinfo(torch.int16).max:
            raise ValueError("token ids above 32767 do not fit the replay memory's int16 storage")
        self._reserve(min(self.capacity, self.pos + len(actions)))
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
        self._reserve(n)
        for name in FIELDS:
            getattr(self, name)[:n] = state[name]
        self.size, self.pos = n, state["pos"]
