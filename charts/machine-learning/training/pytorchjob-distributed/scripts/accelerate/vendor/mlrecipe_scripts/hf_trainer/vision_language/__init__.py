"""Vision-language datasets, model-family adapters and training helpers of the accelerate and ray_train VLM
scripts."""
