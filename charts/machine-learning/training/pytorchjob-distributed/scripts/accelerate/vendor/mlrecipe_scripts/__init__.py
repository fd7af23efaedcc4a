"""The framework scripts that the training charts ship under ``scripts/<framework>/`` (one source for all trees).

Recipes run the scripts at the reference's paths below ``/etc/framework-scripts`` (``text/peft_accelerate.py``,
``fine_tune.py`` ...). Those paths are thin entry files that ``make scripts`` generates from this package
(:mod:`mlrecipe_scripts.generate`, layout in :mod:`mlrecipe_scripts.layout`); each tree also ships a copy of the
subpackages it needs under ``vendor/mlrecipe_scripts/``, so the scripts run without mlrecipe installed. Map:

=============================  ==========================================================================
``core``                       what every framework shares: ``script_core`` (errors, logging, ranks,
                               offline defaults), ``progress`` (the one ``$MLRECIPE_METRICS_FILE``
                               writer), ``answer_metrics`` (token F1, ROUGE-L), ``evaluation``
                               (the evaluators' test set, sampling, vLLM / transformers generation, scores)
``hf_trainer``                 the Hugging Face Trainer scripts' common code (accelerate and ray_train):
                               ``common_base``, ``eval_common``, ``trainer_callbacks``, ``text_dataset``
                               (``--hfdc_*`` datasets, SFT/CPT tokenization) and ``vision_language``
                               (VLM datasets, adapters, ``training_common``, ``test_adapters``)
``lightning_core``             what the Lightning-based scripts share (pytorch_lightning and nemo2):
                               ``script_common`` (flags from dataclasses), ``sft_data``
``accelerate``                 ``framework: accelerate``: ``common``, ``text/*`` trainers, ``rm_dataset``,
                               ``vision_language/*`` trainers, ``convert_checkpoint_to_hf``, ``test_checkpoint``
``ray_train``                  ``framework: ray_train``: ``common``, ``ray_launch`` (driver and workers),
                               ``ray_callbacks``, ``text/*``, ``vision_language/*``, convert / test
``pytorch_lightning``          ``framework: pytorch_lightning``: ``ptl_common``, ``ptl_dataset``, ``fine_tune``,
                               convert / test
``nemo2``                      ``framework: nemo2``: ``nemo2_common``, ``nemo2_dataset``, ``fine_tune``,
                               convert / test
``encoder_transformers``       ``framework: encoder_transformers`` (serving/triton-inference-server): Triton
                               python-backend models over ``encoder_base``, shipped as flat files
                               (:attr:`~mlrecipe_scripts.layout.Tree.flat`)
=============================  ==========================================================================

Modules import each other by their full names (``from mlrecipe_scripts.core.script_core import log``); nothing
here edits ``sys.path`` except an entry file's one bootstrap line (it puts its tree's ``vendor/`` first, so that the
tree's own copy of this package is the one imported) and :func:`import_root`, which Ray workers and NeMo's launcher
get as their import path.

Add a framework: write ``mlrecipe_scripts/<framework>/`` (shared code goes to ``core`` / ``hf_trainer`` /
``lightning_core``, never into another framework's subpackage), add a :class:`~mlrecipe_scripts.layout.Tree` to
:data:`mlrecipe_scripts.layout.TREES` (chart folder, subpackages, reference path -> module of each entry script),
run ``make scripts`` and commit the generated tree; ``tests/charts/test_framework_delivery.py`` fails while a
committed tree differs from a fresh generation.
"""

from __future__ import annotations

from pathlib import Path


def import_root() -> str:
    """The directory holding this package: a framework tree's ``vendor/`` on a cluster, ``src/`` in a checkout."""
    return str(Path(__file__).resolve().parent.parent)
