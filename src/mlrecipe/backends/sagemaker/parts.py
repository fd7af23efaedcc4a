"""The parts a training job and an endpoint step build alike from the recipe and the options: the image, the role,
the VPC config, the tags and the recipe's environment (credential-like values refused)."""

from __future__ import annotations

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host.contract import recipe_env
from mlrecipe.backends.sagemaker.api import Tag, VpcConfig
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.credentials import is_secret
from mlrecipe.spec.load import StepSpec

LOCAL_ROLE = "arn:aws:iam::000000000000:role/mlrecipe-local"
LOCAL_IMAGE = "mlrecipe-local"  #: local mode runs the hosts with this machine's Python, whatever the image


def image(step: StepSpec, options: SageMakerOptions) -> tuple[str, bool]:
    """(the image SageMaker runs, whether ``options.images`` mapped it): the recipe's image (mode local: any),
    through the option's map; "" when there is none."""
    name = step.recipe.image_name or (LOCAL_IMAGE if options.mode == "local" else "")
    if name in options.images:
        return options.images[name], True
    return name, False


def role(options: SageMakerOptions) -> str:
    """The execution role: the option's, a placeholder in mode local, else ""."""
    return options.role_arn or (LOCAL_ROLE if options.mode == "local" else "")


def vpc(options: SageMakerOptions) -> VpcConfig | None:
    """The VPC config when the options name subnets or security groups."""
    if options.subnets or options.security_groups:
        return VpcConfig(tuple(options.security_groups), tuple(options.subnets))
    return None


def tags(options: SageMakerOptions, own: dict[str, str]) -> tuple[Tag, ...]:
    """The options' tags, then mlrecipe's own (which win)."""
    return tuple(Tag(k, v) for k, v in {**options.tags, **own}.items())


def recipe_environment(step: StepSpec, ctx: ReleaseContext) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """The step block's ``env`` as values, and the (index, name) of each credential-like entry left out (it would
    be visible in DescribeTrainingJob or DescribeModel)."""
    values = recipe_env(step, ctx)
    out: dict[str, str] = {}
    secrets: list[tuple[int, str]] = []
    for i, entry in enumerate(step.block.env):
        if is_secret(entry.name, entry.value):
            secrets.append((i, entry.name))
        else:
            out[entry.name] = values.get(entry.name, entry.value)
    return out, secrets
