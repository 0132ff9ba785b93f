"""Many processes: torch.distributed helpers for DD-PPO (`distributed`), FSDP2 sharding (`sharding`), and
host-device copies (`transfer`)."""
