"""One host's ``/opt/ml`` tree and ``SM_*`` variables, as SageMaker's training containers get them.

The files (``input/config/{hyperparameters,resourceconfig,inputdataconfig}.json``, ``input/data/<channel>/``,
``model/``, ``output/data/``, ``output/failure``) and the variables follow AWS's training-container contract and
what the ``sagemaker-training`` toolkit derives from them (``SM_HOSTS`` as a JSON list, ``SM_HPS``,
``SM_HP_<NAME>``, ``SM_CHANNEL_<NAME>``, ...): a test reads a tree built here with that toolkit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

OPT_ML = "/opt/ml"
GROUP = "homogeneousCluster"
INTERFACE = "lo"
SAGEMAKER_HP_PREFIX = "sagemaker_"


def host_names(count: int) -> list[str]:
    """``algo-1`` ... ``algo-N``, as SageMaker names the hosts of a job."""
    return [f"algo-{i}" for i in range(1, count + 1)]


def host_address(index: int) -> str:
    """The loopback address ``algo-<index+1>`` resolves to inside the job's hosts."""
    return f"127.0.10.{index + 1}"


def hosts_file(count: int, base: str) -> str:
    """``/etc/hosts`` as the job's hosts see it: the machine's entries plus one line per ``algo-N``."""
    lines = [base.rstrip("\n")] if base.strip() else ["127.0.0.1 localhost"]
    lines += [f"{host_address(i)} {name}" for i, name in enumerate(host_names(count))]
    return "\n".join(lines) + "\n"


def resource_config(current: str, hosts: list[str], instance_type: str) -> dict[str, Any]:
    return {
        "current_host": current,
        "current_instance_type": instance_type,
        "current_group_name": GROUP,
        "hosts": hosts,
        "instance_groups": [{"instance_group_name": GROUP, "instance_type": instance_type, "hosts": hosts}],
        "network_interface_name": INTERFACE,
    }


def input_data_config(channels: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for ch in channels:
        source = (ch.get("DataSource") or {}).get("S3DataSource") or {}
        entry = {"TrainingInputMode": ch.get("InputMode", "File"),
                 "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
                 "RecordWrapperType": ch.get("RecordWrapperType", "None")}
        if ch.get("ContentType"):
            entry["ContentType"] = ch["ContentType"]
        out[ch["ChannelName"]] = entry
    return out


def _decoded(value: str) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def _env_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _cmd_args(hps: dict[str, Any]) -> list[str]:
    """The hyperparameters as a training script's command-line arguments (``SM_USER_ARGS``)."""
    out = []
    for key in sorted(hps):
        value = hps[key]
        out.append(f"--{key}" if len(key) > 1 else f"-{key}")
        if isinstance(value, dict):
            out.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            out.append("" if value is None else str(value))
    return out


def sm_env(request: dict[str, Any], current: str, hosts: list[str], num_gpus: int, num_cpus: int) -> dict[str, str]:
    """The ``SM_*`` (and ``TRAINING_JOB_NAME``) variables of host ``current``."""
    instance_type = request["ResourceConfig"].get("InstanceType", "local")
    channels = sorted(ch["ChannelName"] for ch in request.get("InputDataConfig") or [])
    hps = {k: _decoded(v) for k, v in (request.get("HyperParameters") or {}).items()
           if not k.startswith(SAGEMAKER_HP_PREFIX)}
    config = resource_config(current, hosts, instance_type)
    values: dict[str, Any] = {
        "hosts": hosts, "current_host": current, "current_instance_type": instance_type,
        "current_instance_group": GROUP, "network_interface_name": INTERFACE,
        "num_gpus": num_gpus, "num_cpus": num_cpus, "hps": hps, "channels": channels,
        "model_dir": f"{OPT_ML}/model", "input_dir": f"{OPT_ML}/input", "input_config_dir": f"{OPT_ML}/input/config",
        "output_dir": f"{OPT_ML}/output", "output_data_dir": f"{OPT_ML}/output/data",
        "output_intermediate_dir": f"{OPT_ML}/output/intermediate",
        "resource_config": config, "input_data_config": input_data_config(request.get("InputDataConfig") or []),
    }
    values["user_args"] = _cmd_args(hps)
    values["log_level"] = _decoded((request.get("HyperParameters") or {}).get("sagemaker_container_log_level", "20"))
    values.update({f"channel_{name}": f"{OPT_ML}/input/data/{name}" for name in channels})
    values.update({f"hp_{key}": value for key, value in hps.items()})
    env = {f"SM_{key.upper()}": _env_value(value) for key, value in values.items()}
    env["TRAINING_JOB_NAME"] = request["TrainingJobName"]
    env["CURRENT_HOST"] = current
    return env


def make_tree(home: Path, request: dict[str, Any], current: str, hosts: list[str]) -> Path:
    """Create host ``current``'s ``/opt/ml`` tree under ``home``: config files and empty directories (channels
    are filled by the staging step). Returns the tree's root."""
    tree = home / "opt-ml"
    config = tree / "input" / "config"
    for d in (config, tree / "model", tree / "output" / "data", tree / "output" / "intermediate", tree / "code",
              tree / "checkpoints"):
        d.mkdir(parents=True, exist_ok=True)
    channels = request.get("InputDataConfig") or []
    for ch in channels:
        (tree / "input" / "data" / ch["ChannelName"]).mkdir(parents=True, exist_ok=True)
    instance_type = request["ResourceConfig"].get("InstanceType", "local")
    (config / "hyperparameters.json").write_text(json.dumps(request.get("HyperParameters") or {}))
    (config / "resourceconfig.json").write_text(json.dumps(resource_config(current, hosts, instance_type)))
    (config / "inputdataconfig.json").write_text(json.dumps(input_data_config(channels)))
    os.chmod(tree, 0o755)
    return tree
