"""The accelerate vision-language trainers (SFT with LoRA, CPT)."""
