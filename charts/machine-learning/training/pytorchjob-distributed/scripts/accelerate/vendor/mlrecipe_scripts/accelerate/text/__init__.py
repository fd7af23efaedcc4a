"""The accelerate text trainers (SFT, CPT, reward model, DPO, PPO) and the preference data module."""
