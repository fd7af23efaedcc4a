"""The Ray Train vision-language trainers (SFT, CPT)."""
