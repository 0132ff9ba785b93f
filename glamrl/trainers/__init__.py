"""The training loops side by side: PPO (llm, npae, symbolic) in `ppo.py`, off-policy DRRN in `drrn.py`,
behavioural cloning in `bc.py`, and the skeleton they share (`common.Session`). The API's `glamrl.train(config)`
runs the loop a config's agent kind names (`glamrl.api.train`)."""
