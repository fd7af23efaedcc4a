"""Megatron data preparation: shards -> ``.bin/.idx`` (see :mod:`.prepare`)."""
