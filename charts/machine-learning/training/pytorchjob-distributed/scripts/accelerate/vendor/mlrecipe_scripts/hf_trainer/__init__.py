"""The Hugging Face Trainer scripts' common code, shared by ``accelerate`` and ``ray_train``."""
