"""``gpt/export_hf.py``: a pretraining checkpoint -> a Hugging Face model folder (``GPT2LMHeadModel``), and back.

    gpt/export_hf.py --load CKPT_DIR --output HF_DIR [--iteration N] [--tokenizer-dir DIR]
    gpt/export_hf.py --import-hf HF_DIR --save CKPT_DIR [--iteration N] [--impl torch|megatron] [--tp N] [--te-names]

Export reads the tracker's iteration (or ``--iteration``) of either of pretraining's implementations: the plain-torch
GPT (CPU path) or megatron-core's ``GPTModel`` (``impl: megatron`` in this project's file, Megatron's
``mp_rank_NN/model_optim_rng.pt`` folders with the tensor-parallel shards merged, or megatron-core's ``torch_dist``
checkpoint: :mod:`.megatron_checkpoint`). It writes ``config.json``,
``model.safetensors`` (float32), ``generation_config.json``, the tokenizer the data was prepared with (the data
manifest's ``tokenizer/`` folder, found through the checkpoint's ``--data-manifest`` / ``--data-path``, or
``--tokenizer-dir``) and ``mlrecipe_export.json`` (where it came from). The folder appears whole or not at all.
The weight mapping is :mod:`.hf_mapping`'s table.

Import writes the Hugging Face model as a model-only checkpoint of this project's layout (no optimizer state: for
evaluation and export, not for resuming a run). Export then import gives the same tensors, bit for bit.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mlrecipe_scripts.core.script_core import ScriptError, atomic_dir, atomic_file, log, offline_defaults, run_main

WEIGHTS = "model.safetensors"
PROVENANCE = "mlrecipe_export.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpt/export_hf.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", help="export: the pretraining's --save folder")
    p.add_argument("--output", help="export: the Hugging Face folder to write")
    p.add_argument("--iteration", type=int, help="export: this iteration (default: the newest); import: the "
                   "iteration to write (default: the exported one, else 0)")
    p.add_argument("--tokenizer-dir", help="export: the tokenizer folder (default: the data manifest's)")
    p.add_argument("--import-hf", help="import: a Hugging Face GPT-2 folder")
    p.add_argument("--save", help="import: the checkpoint folder to write")
    p.add_argument("--impl", choices=("torch", "megatron"), default="torch", help="import: which model's names")
    p.add_argument("--tp", type=int, default=1, help="import (megatron): tensor-parallel ranks to split into")
    p.add_argument("--te-names", action="store_true", help="import (megatron): TransformerEngine's layer names")
    return p


# ---------------------------------------------------------------------------------------------------- reading


def read_checkpoint(root: Path, iteration: int | None) -> dict[str, Any]:
    """``{"impl", "model", "shape", "args", "iteration", "folder"}`` of a checkpoint folder: this project's file, or
    Megatron's layouts (:mod:`.megatron_checkpoint`: tensor-parallel shards merged, torch_dist read)."""
    from mlrecipe_scripts.megatron.gpt import checkpoint, megatron_checkpoint

    if iteration is None:
        iteration = checkpoint.latest(root) if root.is_dir() else None
        if iteration is None and root.is_dir():
            found = [int(m.group(1)) for p in root.glob("iter_*") if (m := checkpoint.ITER.match(p.name))
                     and megatron_checkpoint.is_megatron_folder(p)]
            iteration = max(found) if found else None
    if iteration is None:
        raise ScriptError(f"--load {root}: no checkpoint")
    folder = checkpoint.folder(root, iteration)
    if (folder / checkpoint.FILE).is_file():
        state = checkpoint.load(root, iteration)
        if "model" not in state or "shape" not in state:
            raise ScriptError(f"{folder / checkpoint.FILE}: not a pretraining checkpoint (no model or shape)")
        return {"impl": state.get("impl", "torch"), "model": state["model"], "shape": dict(state["shape"]),
                "args": dict(state.get("args") or {}), "iteration": iteration, "folder": str(folder)}
    if not folder.is_dir():
        raise ScriptError(f"--load {root}: no checkpoint of iteration {iteration}")
    return {"impl": "megatron", **megatron_checkpoint.read(folder), "iteration": iteration, "folder": str(folder)}


# ---------------------------------------------------------------------------------------------------- tokenizer


def tokenizer_source(train_args: dict[str, Any], override: str | None) -> tuple[Path | None, dict[str, Any]]:
    """The tokenizer folder the data was prepared with and the manifest's tokenizer record (``{}`` when none)."""
    if override:
        folder = Path(override)
        if not folder.is_dir():
            raise ScriptError(f"--tokenizer-dir {folder}: not a directory")
        return folder, {}
    manifest = None
    if train_args.get("data_manifest"):
        manifest = Path(train_args["data_manifest"])
    elif train_args.get("data_path"):
        words = list(train_args["data_path"])
        prefix = Path(words[-1] if len(words) == 1 else words[1])
        if not prefix.is_absolute() and train_args.get("data_dir"):
            prefix = Path(train_args["data_dir"]) / prefix
        manifest = prefix.parent / "manifest.json"
    if manifest is None or not manifest.is_file():
        return None, {}
    record = json.loads(manifest.read_text()).get("tokenizer") or {}
    folder = manifest.parent / str(record.get("dir") or "tokenizer")
    return (folder if folder.is_dir() and any(folder.iterdir()) else None), record


def write_tokenizer(folder: Path, record: dict[str, Any], target: Path, max_length: int) -> str:
    """A ``tokenizer.json`` + ``tokenizer_config.json`` that transformers' ``AutoTokenizer`` (and vLLM) load, built
    from a Hugging Face tokenizer folder or GPT-2 BPE files; returns the end-of-document token."""
    import shutil

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    config_file = folder / "tokenizer_config.json"
    extra = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if (folder / "tokenizer.json").is_file():
        shutil.copyfile(folder / "tokenizer.json", target / "tokenizer.json")
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        tok = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.save(str(target / "tokenizer.json"))
    else:
        raise ScriptError(f"{folder}: neither tokenizer.json nor vocab.json + merges.txt (a slow tokenizer: export "
                          "with --tokenizer-dir of a folder that has tokenizer.json)")
    vocab = tok.get_vocab(with_added_tokens=True)
    eod = _eos_name(extra) or _token_of(vocab, record.get("eod_id")) or "<|endoftext|>"
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
              "clean_up_tokenization_spaces": False}
    if eod in vocab:
        config.update(eos_token=eod, bos_token=eod, unk_token=eod)
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return eod


def _eos_name(config: dict[str, Any]) -> str | None:
    value = config.get("eos_token")
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _token_of(vocab: dict[str, int], token_id: Any) -> str | None:
    if token_id is None:
        return None
    return next((name for name, i in vocab.items() if i == int(token_id)), None)


# ---------------------------------------------------------------------------------------------------- export


def export(load: Path, output: Path, iteration: int | None, tokenizer_dir: str | None) -> Path:
    """Write the Hugging Face folder of ``load``'s checkpoint; returns ``output``."""
    import torch
    from safetensors.torch import save_file

    from mlrecipe_scripts.megatron.gpt import hf_mapping

    ckpt = read_checkpoint(load, iteration)
    shape, impl = ckpt["shape"], ckpt["impl"]
    rules = hf_mapping.TORCH_GPT if impl == "torch" else hf_mapping.MEGATRON_GPT
    model = ckpt["model"] if impl == "torch" else hf_mapping.megatron_names(ckpt["model"])
    try:
        tensors = hf_mapping.to_hf({k: v.float() for k, v in model.items()}, rules, int(shape["num_layers"]),
                                   int(shape["num_attention_heads"]))
    except hf_mapping.MappingError as exc:
        raise ScriptError(f"{ckpt['folder']}: {exc}") from None
    tied = "lm_head.weight" not in tensors
    folder, record = tokenizer_source(ckpt["args"], tokenizer_dir)
    eod_id = record.get("eod_id")
    with atomic_dir(output) as tmp:
        eod_token = None
        if folder is not None:
            eod_token = write_tokenizer(folder, record, tmp, int(shape["seq_length"]))
            if eod_id is None:
                vocab = json.loads((tmp / "tokenizer.json").read_text()).get("model", {}).get("vocab", {})
                eod_id = vocab.get(eod_token)
        else:
            print(f"warning: no tokenizer found for {load} (the data manifest names none): the export has no "
                  "tokenizer; give --tokenizer-dir", flush=True)
        config = hf_mapping.hf_config(shape, tied, eod_id)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        generation = {"do_sample": False, **({"bos_token_id": eod_id, "eos_token_id": eod_id}
                                              if eod_id is not None else {})}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        save_file({k: v.to(torch.float32).contiguous() for k, v in tensors.items()}, str(tmp / WEIGHTS),
                  metadata={"format": "pt"})
        provenance = {"source": ckpt["folder"], "iteration": ckpt["iteration"], "impl": impl, "shape": shape,
                      "tied_embeddings": tied, "tokenizer": str(folder) if folder else None,
                      "args": _jsonable(ckpt["args"])}
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n")
    log(f"exported {ckpt['folder']} ({impl}, {shape['num_layers']} layers x {shape['hidden_size']}, vocabulary "
        f"{shape['vocab_size']}) to {output} as GPT2LMHeadModel"
        + (f"; tokenizer from {folder}" if folder else "; no tokenizer"))
    return output


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if isinstance(v, (str, int, float, bool, list, type(None)))}


# ---------------------------------------------------------------------------------------------------- import


def import_hf(source: Path, save: Path, iteration: int | None, impl: str, tp: int, te_names: bool) -> Path:
    """Write ``source`` (a GPT-2 Hugging Face folder) as a model-only checkpoint in ``save``; returns its folder."""
    import torch
    from safetensors.torch import load_file

    from mlrecipe_scripts.megatron.gpt import checkpoint, hf_mapping

    config_file, weights = source / "config.json", source / WEIGHTS
    for path in (config_file, weights):
        if not path.is_file():
            raise ScriptError(f"--import-hf {source}: no {path.name}")
    provenance = json.loads((source / PROVENANCE).read_text()) if (source / PROVENANCE).is_file() else {}
    try:
        shape = hf_mapping.shape_from_config(json.loads(config_file.read_text()))
        if provenance.get("shape"):
            shape = {**shape, **{k: v for k, v in provenance["shape"].items() if k in shape}}
        rules = hf_mapping.TORCH_GPT if impl == "torch" else hf_mapping.MEGATRON_GPT
        model = hf_mapping.from_hf(load_file(str(weights)), rules, shape["num_layers"], shape["num_attention_heads"])
    except (hf_mapping.MappingError, KeyError, ValueError) as exc:
        raise ScriptError(f"--import-hf {source}: {exc}") from None
    if iteration is None:
        iteration = int(provenance.get("iteration") or 0)
    state: dict[str, Any] = {"model": model, "iteration": iteration, "impl": impl, "shape": shape,
                             "args": provenance.get("args") or {}, "imported_from": str(source)}
    if impl == "megatron":
        try:
            shards = hf_mapping.split_tensor_parallel(model, hf_mapping.MEGATRON_GPT, shape["num_layers"], tp)
        except hf_mapping.MappingError as exc:
            raise ScriptError(f"--tp {tp}: {exc}") from None
        if te_names:
            renames = {local.format(i=i): fused.format(i=i) for local, fused in
                       hf_mapping.TRANSFORMER_ENGINE_NAMES.items() for i in range(shape["num_layers"])}
            shards = [{renames.get(k, k): v for k, v in shard.items()} for shard in shards]
        if tp > 1:
            folder = checkpoint.folder(save, iteration)
            with atomic_dir(folder) as tmp:
                for rank, shard in enumerate(shards):
                    (tmp / f"mp_rank_{rank:02d}").mkdir()
                    torch.save({**state, "model": shard}, tmp / f"mp_rank_{rank:02d}" / checkpoint.FILE)
            with atomic_file(save / checkpoint.TRACKER) as tracker:
                tracker.write_text(f"{iteration}\n")
            log(f"imported {source} into {folder} ({tp} tensor-parallel shards)")
            return folder
        state["model"] = shards[0]
    folder = checkpoint.save(save, iteration, state)
    log(f"imported {source} into {folder} ({impl})")
    return folder


def main(argv: list[str] | None = None) -> int:
    offline_defaults()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.import_hf:
        if not args.save:
            parser.error("--import-hf needs --save")
        if args.tp < 1:
            parser.error("--tp must be positive")
        if args.impl == "torch" and (args.tp > 1 or args.te_names):
            parser.error("--tp and --te-names are for --impl megatron")
        import_hf(Path(args.import_hf), Path(args.save), args.iteration, args.impl, args.tp, args.te_names)
        return 0
    if not (args.load and args.output):
        parser.error("give --load and --output (export), or --import-hf and --save (import)")
    export(Path(args.load), Path(args.output), args.iteration, args.tokenizer_dir)
    return 0


if __name__ == "__main__":
    run_main(main)
