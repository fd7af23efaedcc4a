"""``framework: megatron``: Megatron-style LLM pretraining data and training (the NeMo-on-EKS source system's stages).

``data.prepare`` (entry ``data/prepare.py``) downloads, extracts and tokenizes Pile-shaped ``NN.jsonl.zst`` shards
into Megatron's indexed format (``<prefix>_NN_text_document.bin/.idx``) across MPI ranks and writes
``manifest.json``; ``data.sample_corpus`` builds small offline shards and a BPE tokenizer for examples and tests.
"""
