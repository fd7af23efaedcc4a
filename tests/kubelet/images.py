"""The image table: what a container image would give a container here (its ENTRYPOINT/CMD, a Python environment).

No image is pulled. Like the local backend (``src/mlrecipe/backends/host/images.py``), an image maps to a Python
environment beside this checkout whose ``bin`` goes first on the container's ``PATH``: vLLM's and Ray's images to
``.venv-vllm``, Triton's to ``.venv-triton``, NeMo's to ``.venv-nemo2`` (each where it exists), every other image
(AWS Neuron's training image included: torch on CPU, no Neuron SDK) to ``.venv``. ENTRYPOINT/CMD are used only
when a container gives no ``command`` (the kubelet's rule); an image that is not in the table and has no command
fails the pod, naming the image.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Programs an image has that its environment here lacks, as small scripts run by the environment's ``python3``:
#: ``image_bin/<name>/`` goes on ``PATH`` after the environment's ``bin`` (``pytorch``: ``torchrun``, which NVIDIA's
#: PyTorch image and the images built on it, NeMo's, have; ``.venv-nemo2`` reuses torch without its scripts;
#: ``neuronx``: a stand-in for ``neuron_parallel_compile``, which AWS Neuron's training image has).
IMAGE_BIN = Path(__file__).resolve().parent / "image_bin"


@dataclass(frozen=True)
class Image:
    """One row of the table: an image pattern, the image's ENTRYPOINT and CMD, its environment (``None``: ``.venv``)."""

    pattern: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    venv: str = ".venv"
    known: bool = True  #: False for the catch-all row: ENTRYPOINT/CMD unknown
    image_bin: str = ""  #: a folder of :data:`IMAGE_BIN` with programs the image has and the environment lacks


TABLE: tuple[Image, ...] = (
    # vLLM's docker/Dockerfile (vllm-openai target): ENTRYPOINT ["vllm", "serve"]
    Image("vllm/vllm-openai*", entrypoint=("vllm", "serve"), venv=".venv-vllm"),
    Image("*/vllm-openai*", entrypoint=("vllm", "serve"), venv=".venv-vllm"),
    Image("rayproject/ray*", cmd=("bash",), venv=".venv-vllm"),
    Image("anyscale/ray*", cmd=("bash",), venv=".venv-vllm"),
    Image("nvcr.io/nvidia/tritonserver*", cmd=("tritonserver",), venv=".venv-triton"),
    Image("nvcr.io/nvidia/nemo:*", cmd=("bash",), venv=".venv-nemo2", image_bin="pytorch"),
    Image("nvcr.io/nvidia/pytorch:*", cmd=("bash",)),
    # AWS Neuron's training DLC (aws-neuron/deep-learning-containers docker/pytorch/training/2.6.0/Dockerfile.neuronx):
    # ENTRYPOINT ["bash", "-m", "start_with_right_hostname.sh"] (runs its arguments; it fixes the hostname on
    # SageMaker only), CMD ["/bin/bash"]; its torch-neuronx, neuronx-cc and Neuron runtime are not here: torch on CPU,
    # and a stand-in for torch-neuronx's neuron_parallel_compile CLI (image_bin/neuronx)
    Image("public.ecr.aws/neuron/pytorch-training-neuronx*", cmd=("/bin/bash",), image_bin="neuronx"),
    # mpioperator/base (v0.6.0 build/base/Dockerfile): no ENTRYPOINT; openmpi adds openmpi-bin
    Image("mpioperator/*", cmd=("bash",)),
    Image("*python:*", cmd=("python3",)),
    Image("*", known=False),
)


@dataclass(frozen=True)
class ImageRun:
    """What the harness runs for one image: the table row and the environment's ``bin`` directory."""

    image: str
    row: Image
    bin_dir: Path

    def path(self) -> str:
        """The container's ``PATH``: the environment's ``bin``, the image's programs the environment lacks
        (:data:`IMAGE_BIN`), then the usual system directories."""
        extra = f"{IMAGE_BIN / self.row.image_bin}:" if self.row.image_bin else ""
        return f"{self.bin_dir}:{extra}{SYSTEM_PATH}"


def resolve(image: str, repo: Path = REPO) -> ImageRun:
    """The table row of ``image`` and its environment (``.venv`` when the row's own is not built)."""
    row = next(r for r in TABLE if fnmatch.fnmatch(image, r.pattern))
    bin_dir = repo / row.venv / "bin"
    if not (bin_dir / "python").exists():
        bin_dir = repo / ".venv" / "bin"
    return ImageRun(image, row, bin_dir)


def argv_for(run: ImageRun, command: list[str] | None, args: list[str] | None) -> list[str]:
    """The kubelet's rule: ``command`` replaces ENTRYPOINT (and drops CMD), ``args`` replaces CMD."""
    if command:
        return [*command, *(args or [])]
    if not run.row.known:
        raise LookupError(f"image {run.image} is not in the harness's image table (tests/kubelet/images.py) and the "
                          "container gives no command: its ENTRYPOINT is unknown")
    return [*run.row.entrypoint, *(args if args else run.row.cmd)]
