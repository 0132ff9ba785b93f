"""A run directory and what it holds: the paths, lock and ownership rules (`dir`), checkpoints (`checkpoint`),
and the log (`log`)."""
