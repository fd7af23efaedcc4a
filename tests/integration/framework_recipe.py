"""A recipe that uses its chart's framework scripts the way the reference recipes do (``cd $SCRIPTS_DIR``, a
nested script path, files written next to the scripts), shared by the local and Slurm tests."""

from __future__ import annotations

from pathlib import Path

CHART = "training/pytorchjob-distributed"

RECIPE = """\
image: nvcr.io/nvidia/pytorch:25.10-py3
framework: accelerate
pvc: []
resources:
  nnodes: 1
  nproc_per_node: 1
pre_script:
  - cd $SCRIPTS_DIR
  - mkdir -p tb_logs && echo written > tb_logs/probe
  - |-
    echo "scripts at $(pwd): $(find . -name '*.py' | sort | tr '\\n' ' ')"
train:
  env:
    - {name: SCRIPTS_DIR, value: /etc/framework-scripts}
  command: [python3, text/peft_accelerate.py]
  args: [--help, "| grep -- --hfdc_dataset_name"]
post_script:
  - cat tb_logs/probe
"""


def write_recipe(directory: Path) -> Path:
    path = directory / "framework.yaml"
    path.write_text(RECIPE, encoding="utf-8")
    return path


def shipped_scripts() -> list[str]:
    """The ``.py`` files of the accelerate tree, as ``./text/peft_accelerate.py``."""
    from mlrecipe.spec.catalog import lookup
    from mlrecipe.spec.framework_scripts import framework_scripts

    found = framework_scripts(lookup(CHART), "accelerate")
    assert found is not None
    return sorted(f"./{rel}" for rel in found.files() if rel.endswith(".py"))
