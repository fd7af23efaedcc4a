"""A pod's volumes as directories on this machine: ConfigMaps and Secrets written out (``items``, modes), PVCs as
directories shared by every pod of the run, ``emptyDir`` and generic ephemeral volumes fresh per pod, ``hostPath``
as it is. A missing ConfigMap/Secret or key is the kubelet's FailedMount message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.kubelet.store import NotFound, Store


class MountError(RuntimeError):
    """The kubelet could not set up a volume (FailedMount)."""


def _write_config(kind: str, source: dict[str, Any], store: Store, namespace: str, into: Path) -> None:
    name = source.get("name") or source.get("secretName") or ""
    try:
        data = store.config_data(kind, namespace, name)
    except NotFound as exc:
        if source.get("optional"):
            into.mkdir(parents=True, exist_ok=True)
            return
        raise MountError(f"MountVolume.SetUp failed: {exc}") from None
    into.mkdir(parents=True, exist_ok=True)
    default_mode = int(source.get("defaultMode", 0o644))
    items = source.get("items")
    chosen = [(i["key"], i["path"], i.get("mode")) for i in items] if items else [(k, k, None) for k in data]
    for key, path, mode in chosen:
        if key not in data:
            if source.get("optional"):
                continue
            raise MountError(f"MountVolume.SetUp failed: {kind.lower()} references non-existent config key: {key} "
                             f"({kind} {namespace}/{name})")
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[key])
        target.chmod(int(mode) if mode is not None else default_mode)


def materialize(pod: dict[str, Any], store: Store, pod_dir: Path, claim_dir: Any) -> dict[str, Path]:
    """Volume name -> directory (or file) for every volume of ``pod``; ``claim_dir(name)`` gives a PVC's directory."""
    namespace = pod["metadata"]["namespace"]
    out: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        where = pod_dir / "volumes" / name
        if "configMap" in volume:
            _write_config("ConfigMap", volume["configMap"], store, namespace, where)
        elif "secret" in volume:
            _write_config("Secret", volume["secret"], store, namespace, where)
        elif "emptyDir" in volume or "ephemeral" in volume:
            where.mkdir(parents=True, exist_ok=True)
        elif "persistentVolumeClaim" in volume:
            where = claim_dir(volume["persistentVolumeClaim"]["claimName"])
        elif "hostPath" in volume:
            where = Path(volume["hostPath"]["path"])
            if not where.exists() and volume["hostPath"].get("type") in ("DirectoryOrCreate", None, ""):
                where.mkdir(parents=True, exist_ok=True)
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise MountError(f"volume {name}: type {', '.join(kinds)} is not covered by the harness")
        out[name] = where
    return out
