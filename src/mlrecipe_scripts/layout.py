"""What ``make scripts`` generates: each chart's ``scripts/<framework>/`` tree, from this package.

A tree holds (1) an entry file at each path the recipes run (the reference's paths: ``text/peft_accelerate.py``,
``fine_tune.py`` ...), a few lines that put the tree's ``vendor/`` first on ``sys.path`` and call the module's
``main``, and (2) ``vendor/mlrecipe_scripts/``, a copy of the subpackages of :mod:`mlrecipe_scripts` those modules
import, so that the tree runs where mlrecipe is not installed (``/etc/framework-scripts`` in a training image).
A tree of Triton python-backend models instead holds a subpackage's modules as top-level files that import each
other as siblings (``flat``): a recipe copies them into a model's version folder, where Triton imports them.

Which trees exist (chart, framework, subpackages) is a fact of the CLI's framework registry,
``mlrecipe.spec.frameworks``; this package ships without the CLI and never imports it, so
``tests/unit/test_framework_registry.py`` fails while :data:`TREES` and the registry's trees differ. A new framework
is added to both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CHARTS = "charts/machine-learning"  # below the repository root


@dataclass(frozen=True)
class Entry:
    """A script the recipes run: its path in the tree, the module it runs and the call that runs it."""

    path: str
    module: str
    names: tuple[str, ...] = ("main", "run_main")
    call: str = "run_main(main)"


@dataclass(frozen=True)
class Tree:
    """One ``scripts/<framework>/`` folder of a chart: the subpackages it ships, its entry scripts, files it ships
    as copies of a source file of the repository (path in the tree, path below the repository root), and the
    subpackages whose modules it ships flat, as sibling modules (``flat``)."""

    chart: str
    framework: str
    packages: tuple[str, ...]
    entries: tuple[Entry, ...] = field(default_factory=tuple)
    copies: tuple[tuple[str, str], ...] = ()
    flat: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        """The tree's folder below the repository root."""
        return f"{CHARTS}/{self.chart}/scripts/{self.framework}"


def _entries(prefix: str, pairs: dict[str, str]) -> tuple[Entry, ...]:
    return tuple(Entry(path, f"{prefix}.{module}") for path, module in pairs.items())


_VL = "multimodal/vision_language"
_VL_TOOLS = (
    Entry(f"{_VL}/test_adapters.py", "mlrecipe_scripts.hf_trainer.vision_language.test_adapters", ("main",),
          "sys.exit(main())"),
    Entry(f"{_VL}/adapters/registry.py", "mlrecipe_scripts.hf_trainer.vision_language.adapters.registry",
          ("print_supported_models",), "print_supported_models()"),
)
# Ray Serve's OpenAI application, one module of mlrecipe (it also runs on the host backends), in every vllm-<version>
# folder of the reference and for the vLLM that `make serve-env` pins.
RAYSERVE_VLLM_VERSIONS = ("0.11.0", "0.12.0", "0.13.0", "0.15.0", "0.19.0", "0.32.0")
_RAY_OPENAI = (("openai_api.py", "src/mlrecipe/serve/ray_openai.py"),)

#: The megatron example's client (greedy decoding through the server against transformers' generate of the export),
#: shipped so a cluster's client step runs it from the tree as the local one runs it from the pipeline's folder.
_MEGATRON_CLIENT = (("client.py", "examples/frameworks/megatron/scripts/client.py"),)

_LIGHTNING_ENTRIES = {"fine_tune.py": "fine_tune", "convert_checkpoint_to_hf.py": "convert_checkpoint_to_hf",
                      "test_checkpoint.py": "test_checkpoint"}

_MEGATRON_ENTRIES = (
    Entry("data/prepare.py", "mlrecipe_scripts.megatron.data.prepare"),
    Entry("data/sample_corpus.py", "mlrecipe_scripts.megatron.data.sample_corpus", ("main",), "sys.exit(main())"),
    Entry("gpt/pretrain.py", "mlrecipe_scripts.megatron.gpt.pretrain"),
    Entry("gpt/evaluate.py", "mlrecipe_scripts.megatron.gpt.evaluate"),
    Entry("gpt/export_hf.py", "mlrecipe_scripts.megatron.gpt.export_hf"),
)

TREES: tuple[Tree, ...] = (
    Tree("training/pytorchjob-distributed", "accelerate", ("core", "hf_trainer", "accelerate"), (
        *_entries("mlrecipe_scripts.accelerate", {
            "text/peft_accelerate.py": "text.peft_accelerate",
            "text/cpt_accelerate.py": "text.cpt_accelerate",
            "text/reward_model_accelerate.py": "text.reward_model_accelerate",
            "text/dpo_accelerate.py": "text.dpo_accelerate",
            "text/ppo_accelerate.py": "text.ppo_accelerate",
            "shared/convert_checkpoint_to_hf.py": "convert_checkpoint_to_hf",
            "shared/test_checkpoint.py": "test_checkpoint",
            f"{_VL}/peft_accelerate.py": "vision_language.peft_accelerate",
            f"{_VL}/cpt_accelerate.py": "vision_language.cpt_accelerate",
        }),
        *_VL_TOOLS,
    )),
    Tree("training/pytorchjob-distributed", "pytorch_lightning", ("core", "lightning_core", "pytorch_lightning"),
         _entries("mlrecipe_scripts.pytorch_lightning", _LIGHTNING_ENTRIES)),
    Tree("training/pytorchjob-distributed", "nemo2", ("core", "lightning_core", "nemo2"),
         _entries("mlrecipe_scripts.nemo2", _LIGHTNING_ENTRIES)),
    Tree("training/raytrain", "ray_train", ("core", "hf_trainer", "ray_train"), (
        *_entries("mlrecipe_scripts.ray_train", {
            "text/ray_train_sft.py": "text.ray_train_sft",
            "text/cpt_ray_train.py": "text.cpt_ray_train",
            "shared/convert_checkpoint_to_hf.py": "convert_checkpoint_to_hf",
            "shared/test_checkpoint.py": "test_checkpoint",
            f"{_VL}/ray_train_vlm.py": "vision_language.ray_train_vlm",
            f"{_VL}/cpt_ray_train_vlm.py": "vision_language.cpt_ray_train_vlm",
        }),
        *_VL_TOOLS,
    )),
    Tree("data-prep/mpijob-data-process", "megatron", ("core", "megatron"), _MEGATRON_ENTRIES),
    Tree("training/pytorchjob-distributed", "megatron", ("core", "megatron"), _MEGATRON_ENTRIES,
         copies=_MEGATRON_CLIENT),
    *(Tree("serving/rayserve", f"vllm-{version}", (), copies=_RAY_OPENAI) for version in RAYSERVE_VLLM_VERSIONS),
    Tree("serving/triton-inference-server", "encoder_transformers", (), flat=("encoder_transformers",)),
    # the framework examples' model step: a tiny model and datasets, one self-contained file
    Tree("data-prep/data-process", "transformers", (),
         copies=(("make_tiny_model.py", "src/mlrecipe_scripts/make_tiny_model.py"),)),
)
