"""``framework: encoder_transformers``: Triton python-backend models of encoder tasks.

One module per task (``embeddings``, ``masked_lm``, ``reranker``, ``sequence_classification``,
``token_classification``), each a ``TritonPythonModel`` over :class:`.encoder_base.EncoderBaseModel`, served by the
chart ``serving/triton-inference-server``. Triton loads a model from its own version folder, so ``make scripts``
ships these modules as top-level files of the chart's ``scripts/encoder_transformers/`` (``from .encoder_base
import`` made ``from encoder_base import``), and a recipe copies a task file to ``<repo>/<model>/1/model.py`` with
``encoder_base.py`` beside it.
"""
