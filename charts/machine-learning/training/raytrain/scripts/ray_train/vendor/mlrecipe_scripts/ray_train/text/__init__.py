"""The Ray Train text trainers (SFT, CPT)."""
