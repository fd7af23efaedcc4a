"""One-line progress reporting for users' own training scripts (see :mod:`mlrecipe.metrics`).

- Hugging Face: ``Trainer(..., callbacks=[mlrecipe.integrations.transformers.MlrecipeCallback()])``
- Lightning: ``Trainer(callbacks=[mlrecipe.integrations.lightning.MlrecipeProgress()])``
"""
