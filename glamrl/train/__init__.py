"""The training loops side by side: PPO (llm, npae, symbolic), off-policy DRRN, behavioural cloning, and the
skeleton they share (`common.Session`)."""
