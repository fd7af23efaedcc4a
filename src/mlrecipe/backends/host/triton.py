"""``serving/triton-inference-server`` on hosts (local and Slurm backends): what the host's Triton can serve.

On a host the recipe's ``tritonserver`` is the real Triton 2.51 that PyPI's ``nvidia-pytriton`` ships
(``make triton-env``; :mod:`mlrecipe.serve.tritonserver`): it has the python backend only. A recipe that needs
Triton's vLLM or TensorRT-LLM backend (its image, its ``config.pbtxt``, or TensorRT-LLM's launcher script)
fails before it starts, with that reason; it still renders and runs on Kubernetes with its own image.
"""

from __future__ import annotations

import re

from mlrecipe.spec.load import StepSpec

#: The Triton that runs on hosts and what it lacks.
HOST_TRITON = "the host's tritonserver (nvidia-pytriton's Triton 2.51, python backend only)"
_NAMES = {"vllm": "vLLM", "tensorrtllm": "TensorRT-LLM", "trtllm": "TensorRT-LLM"}
_CONFIG = re.compile(r"""\bbackend\s*:\s*["']?(vllm|tensorrtllm)\b""")
_IMAGE = re.compile(r"tritonserver:[^/]*?\b(vllm|trtllm)\b")
_TRTLLM_LAUNCHER = re.compile(r"\blaunch_triton_server\.py\b")
#: TensorRT-LLM's fill_template.py parameter naming the model's backend (``triton_backend:tensorrtllm``).
_FILL_TEMPLATE = re.compile(r"""\btriton_backend\s*[:=]\s*["']?(vllm|tensorrtllm)\b""", re.I)


def unsupported_backend(step: StepSpec) -> tuple[str, str] | None:
    """(backend, where it was seen) when the recipe needs a Triton backend the host's Triton lacks."""
    recipe = step.recipe
    for field, lines in (("inline_script", recipe.inline_script), ("pre_script", recipe.pre_script),
                         ("server.command/args", step.command_line)):
        text = "\n".join(lines)
        if match := _CONFIG.search(text):
            return _NAMES[match.group(1)], f'config.pbtxt backend: "{match.group(1)}" in {field}'
        if match := _FILL_TEMPLATE.search(text):
            return _NAMES[match.group(1).lower()], f"{match.group(0)} in {field}"
        if field.startswith("server") and _TRTLLM_LAUNCHER.search(text):
            return "TensorRT-LLM", f"TensorRT-LLM's launch_triton_server.py in {field}"
    image = recipe.image_name or ""
    if match := _IMAGE.search(image):
        return _NAMES[match.group(1)], f"image {image}"
    return None


def needs(step: StepSpec) -> tuple[str, ...]:
    """Python packages the step's environment needs: ``nvidia-pytriton`` when the recipe runs ``tritonserver``."""
    words = " ".join(step.command_line).split()
    return ("pytriton",) if step.chart.triton and words and words[0].endswith("tritonserver") else ()


def problems(step: StepSpec, backend: str) -> list[str]:
    """Why a Triton step cannot run on ``backend`` (a host backend); empty for charts that do not serve with Triton
    (:attr:`~mlrecipe.spec.catalog.ChartInfo.triton`)."""
    if not step.chart.triton:
        return []
    found = unsupported_backend(step)
    if found is None:
        return []
    name, where = found
    return [f"chart {step.chart.name}: the recipe needs Triton's {name} backend ({where}), which {HOST_TRITON} "
            f"does not have: not supported on backend {backend}; run it on Kubernetes (--backend kubernetes) with "
            "its image, or serve the model with Triton's python backend or python -m mlrecipe.serve"]
