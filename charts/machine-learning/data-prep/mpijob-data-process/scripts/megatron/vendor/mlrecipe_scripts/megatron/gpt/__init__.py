"""GPT pretraining from Megatron ``.bin/.idx`` data (see :mod:`.pretrain`)."""
