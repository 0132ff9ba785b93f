"""A run directory and what it holds: `dir.RunDir` (every path, the lock, the config and the resume rule, the
one owner the others ask), checkpoints and their schema (`checkpoint`), the log (`log`: log.csv, TensorBoard and
the tracker of `trackers`), and the names of what is logged (`metrics`)."""
