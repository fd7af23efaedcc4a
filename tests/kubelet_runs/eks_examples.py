"""``make kubelet-scenarios``: the framework examples' EKS renderings (``pipeline-eks.yaml``) run step by step through
the harness, as one release would run them: every step rendered with ``mlrecipe template`` from the pipeline's own
recipe files (the p4d / one-GPU overlays included) plus a sizes overlay laid last, then run with the ``pv-fsx`` and
``pv-efs`` claims shared by all steps, and what each step wrote checked: the tiny model, the fine-tune checkpoints
and their falling loss, the merged Hugging Face model, the evaluation's metrics (accelerate, Lightning, Ray Train).
The megatron example runs all seven steps: tokenizer, data, pretrain, evaluate and export as above, then its serve
(a RayService: Ray Serve and vLLM) and client steps in one harness run, rendered by ``mlrecipe run --dry-run`` (the
client's ``MLRECIPE_SERVE_URL`` is what the pipeline gives it). ``examples/eks/training`` (``pipeline.yaml``) runs
the same way: Megatron tokenization and pretraining, then an accelerate fine-tune. ``examples/eks/serving`` runs its
snapshot (hf-snapshot, the token from a Secret), then each server with a client Job in one harness run: Triton
(a Deployment) and Ray Serve + vLLM (a RayService), both on the snapshot. ``examples/eks/neuron`` runs its four
steps: tokenizer (hf-snapshot, the token from a Secret), dataset (neuronx-distributed's ``get_dataset.py``), compile
(``neuron_parallel_compile`` over a 2-step trial run) and pretrain, the PyTorchJobs 2 nodes x 1 process, on CPU
stand-ins for the Neuron programs (below).

The sizes overlay (:func:`fine_tune_sizes`) makes 2 nodes x 1 process, asks 1 CPU, and cuts the step counts; the
harness drops the GPU/EFA requests (and says so). The model step runs as rendered: its script is the chart's
(``framework: transformers``, ``/etc/framework-scripts/make_tiny_model.py`` from the framework-scripts ConfigMap).
Stand-ins, said here and in docs/verified.md:

- the accelerate p4d overlay writes an accelerate config with ``distributed_type: FSDP``, which accelerate refuses
  without a CUDA/XPU/... device (``FullyShardedDataParallelPlugin``: "no available devices found"); the overlay keeps
  its pre_script line for line but for ``MULTI_GPU`` (DDP, gloo on CPU, as the CPU recipe ``fine-tune.yaml`` runs);
- the ray_train overlays' runtime env pip lists (torch 2.10.0 with its CUDA wheels, GBs, from PyPI) are emptied: the
  Ray image's environment here has torch, transformers, peft, datasets and vLLM's CPU build;
- megatron: the Hub and the Pile mirror are servers on 127.0.0.1, the model and run sizes are cut
  (:data:`PRETRAIN_SIZES`), and the serve step gets the CPU model's ``max_model_len`` (64 for 2048) and vLLM's CPU
  build a 1 GiB KV cache (:data:`SERVE_ON_CPU`);
- serving: the Hub is a server on 127.0.0.1 serving a tiny Llama under the recipe's model id, the rayserve step
  gets ``tensor_parallel_size`` 1, the tiny model's ``max_model_len`` and the 1 GiB KV cache, and the Triton container
  runs a stand-in for the vLLM backend, which cannot run here (:mod:`tests.kubelet_runs.triton_vllm_stand_in`);
- neuron: Neuron's compiler and runtime do not run (no Neuron device, no neuronx wheels): the Hub is a server on
  127.0.0.1 serving a tiny Llama's tokenizer; ``git.repo_url`` and ``git.commit`` point at a repository on 127.0.0.1
  (:mod:`tests.kubelet_runs.git_stand_in`) holding, at their paths in neuronx-distributed, CPU stand-ins of the
  training script (:mod:`tests.kubelet_runs.neuron_stand_in`: the real one's interface, gloo instead of XLA, its
  graph into the Neuron cache when extracting, looked up compiled there when training, checkpoints), of
  ``get_dataset.py`` and of the modules the script imports (``tests/kubelet_runs/neuronx_distributed/``);
  ``neuron_parallel_compile`` is a stand-in on the neuronx image's ``PATH`` (``tests/kubelet/image_bin/neuronx``);
  the image maps to ``.venv``; the pre_scripts' ``pip3 install`` lines are left out and the sizes cut
  (:data:`NEURON_SIZES`).

Not named ``test_*.py``: 2-10 minutes per example, beyond ``make test``'s budget."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.kubelet_runs.git_stand_in import GitStandIn
from tests.kubelet_runs.hub_stand_in import HubStandIn
from tests.repo import BIN, EXAMPLES, REPO, cli_env

pytest.importorskip("peft", reason="the framework scripts need the frameworks extra")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRAMEWORKS = EXAMPLES / "frameworks"
#: Step counts cut for a CPU: (flag, value) replacing the recipe's own.
ACCELERATE_STEPS = {"--max_steps": "30", "--eval_steps": "10", "--logging_steps": "5", "--max_eval_samples": "8"}
LIGHTNING_STEPS = {"--max_steps": "30", "--val_check_interval": "10", "--log_every_n_steps": "5"}
RAY_TRAIN_STEPS = {"--max_steps": "20", "--eval_steps": "10", "--logging_steps": "2", "--max_eval_samples": "8"}


@dataclass(frozen=True)
class Step:
    """One step of a pipeline file: its name, chart and recipe files (paths on this machine)."""

    name: str
    chart: str
    recipes: tuple[Path, ...]


@dataclass(frozen=True)
class Release:
    """The claims one release's steps share, and where the CLI keeps its state."""

    root: Path
    name: str
    namespace: str

    @property
    def fsx(self) -> Path:
        """The ``pv-fsx`` claim's directory (mounted at /fsx)."""
        return self.root / "fsx"

    @property
    def efs(self) -> Path:
        """The ``pv-efs`` claim's directory (mounted at /efs)."""
        return self.root / "efs"

    def home(self) -> Path:
        """The recipes' ``$HOME`` (``/efs/home/<release>``) as this machine sees it."""
        return self.efs / "home" / self.name


def pipeline_steps(pipeline: Path) -> tuple[str, str, list[Step]]:
    """The release, namespace and steps of a pipeline file, recipe paths resolved against its directory."""
    spec = yaml.safe_load(pipeline.read_text())
    steps = []
    for step in spec["steps"]:
        recipes = step["recipe"] if isinstance(step["recipe"], list) else [step["recipe"]]
        steps.append(Step(step["name"], step["chart"], tuple((pipeline.parent / r).resolve() for r in recipes)))
    return spec["release"], spec["namespace"], steps


def with_flags(args: list[str], flags: dict[str, str]) -> list[str]:
    """``args`` with each ``--flag=value`` of ``flags`` given the new value (every flag must be present)."""
    out, seen = [], set()
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in flags:
            out.append(f"{flag}={flags[flag]}")
            seen.add(flag)
        else:
            out.append(arg)
    assert seen == set(flags), f"the recipe no longer has {sorted(set(flags) - seen)}"
    return out


def fine_tune_sizes(step: Step, flags: dict[str, str]) -> dict:
    """The sizes overlay of a fine-tune step: 2 nodes x 1 process, 1 CPU, the recipe's args with ``flags``."""
    args: list[str] = []
    for recipe in step.recipes:  # the last file that gives args wins, as the overlay does
        args = list((yaml.safe_load(recipe.read_text()).get("train") or {}).get("args") or args)
    return {"resources": {"nnodes": 2, "nproc_per_node": 1, "requests": {"cpu": "1"}},
            "train": {"args": with_flags(args, flags)}}


def fsdp_as_ddp(step: Step) -> list[str]:
    """The p4d overlay's pre_script with its accelerate config's ``distributed_type: FSDP`` made ``MULTI_GPU``."""
    p4d = yaml.safe_load(step.recipes[-1].read_text())
    lines = [line.replace("distributed_type: FSDP", "distributed_type: MULTI_GPU") for line in p4d["pre_script"]]
    assert lines != p4d["pre_script"], "the p4d overlay no longer writes distributed_type: FSDP"
    return lines


def model_step_as_rendered(step: Step) -> None:
    """The model step runs the chart's script from /etc/framework-scripts, nothing from the rendering machine."""
    (recipe,) = (yaml.safe_load(r.read_text()) for r in step.recipes)
    assert recipe["framework"] == "transformers", recipe
    assert recipe["process"]["args"][0] == "/etc/framework-scripts/make_tiny_model.py", recipe["process"]["args"]


def run_step(release: Release, step: Step, overlay: dict | None) -> str:
    """Render one step as ``mlrecipe template`` does with the pipeline's files (and ``overlay`` last), run it through
    the harness with the release's claims, and return the harness's output; fails the test when the step fails."""
    return run_stream(release, render_step(release, step, overlay), step.name)


def render_step(release: Release, step: Step, overlay: dict | None) -> Path:
    """The stream file of one step as ``mlrecipe template`` renders it from the pipeline's files (and ``overlay``
    last)."""
    files = list(step.recipes)
    if overlay is not None:
        path = release.root / f"{step.name}-sizes.yaml"
        path.write_text(yaml.safe_dump(overlay, sort_keys=False))
        files.append(path)
    values = [w for f in files for w in ("-f", str(f))]
    rendered = subprocess.run(
        [str(BIN / "mlrecipe"), "template", release.name, step.chart, *values, "-b", "kubernetes",
         "-n", release.namespace],
        env=cli_env(release.root / "mlhome"), capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    stream = release.root / f"{step.name}.yaml"
    stream.write_text(rendered.stdout)
    return stream


def run_stream(release: Release, stream: Path, logs: str, timeout: int = 600) -> str:
    """The harness over ``stream`` with the release's claims, logs under ``logs/<logs>``; its output (fails the test
    when a workload fails)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.kubelet", str(stream), "--logs", str(release.root / "logs" / logs),
         "--timeout", str(timeout), "--namespace", release.namespace, "--pvc", f"pv-fsx={release.fsx}",
         "--pvc", f"pv-efs={release.efs}"],
        cwd=REPO, capture_output=True, text=True, timeout=timeout + 100)
    assert done.returncode == 0, f"{stream.name}:\n{done.stdout}{done.stderr}"
    return done.stdout


def _release(tmp_path: Path, pipeline: Path) -> tuple[Release, dict[str, Step]]:
    name, namespace, steps = pipeline_steps(pipeline)
    release = Release(tmp_path, name, namespace)
    release.fsx.mkdir()
    release.efs.mkdir()
    assert [s.name for s in steps] == ["model", "fine-tune", "convert", "evaluate"]
    return release, {s.name: s for s in steps}


def _assert_tiny_model(release: Release, out: str) -> None:
    assert "ok: Job/" in out, out
    model = release.fsx / "pretrained-models" / "tiny" / "qwen3"
    assert (model / "model.safetensors").is_file() and json.loads((model / "config.json").read_text())
    assert (release.fsx / "datasets" / "tiny" / "instructions" / "data.jsonl").is_file()


def _metric(release: Release, key: str) -> list[float]:
    """The values of ``key`` the steps wrote to ``$MLRECIPE_METRICS_FILE`` (on the pv-fsx claim), in order."""
    files = sorted((release.fsx / ".mlrecipe" / release.namespace / release.name).glob("*/metrics.jsonl"))
    records = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return [r["metrics"][key] for r in records if key in r.get("metrics", {})]


def _assert_merged(release: Release, converted: Path) -> None:
    import torch
    from safetensors.torch import load_file

    base = load_file(release.fsx / "pretrained-models" / "tiny" / "qwen3" / "model.safetensors")
    tuned = load_file(converted / "model.safetensors")
    key = next(k for k in base if k.endswith("layers.0.self_attn.q_proj.weight"))
    assert not torch.equal(base[key], tuned[key]), "the LoRA update is merged into the converted model"


def _assert_evaluated(evaluation: dict) -> None:
    assert 1 <= evaluation["samples"] <= 16 and evaluation["metric"], evaluation
    assert all(0.0 <= v <= 1.0 for v in evaluation["scores"].values()) and max(evaluation["scores"].values()) > 0


def test_accelerate_eks_pipeline_runs_step_by_step(tmp_path: Path) -> None:
    release, steps = _release(tmp_path, FRAMEWORKS / "accelerate" / "pipeline-eks.yaml")
    model_step_as_rendered(steps["model"])
    out = run_step(release, steps["model"], None)
    _assert_tiny_model(release, out)

    fine_tune = steps["fine-tune"]
    sizes = fine_tune_sizes(fine_tune, ACCELERATE_STEPS)
    sizes["pre_script"] = fsdp_as_ddp(fine_tune)
    out = run_step(release, fine_tune, sizes)
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out and "ok: PyTorchJob/" in out
    losses = _metric(release, "loss")
    assert len(losses) >= 5 and losses[-1] < losses[0] - 0.3, losses
    results = release.home() / "results" / "tiny" / "qwen3"
    assert (results / "checkpoint-30" / "rng_state_1.pth").is_file()  # a world of 2: one rng state per rank
    assert all((release.home() / "logs" / node / "fine-tune.log").is_file() for node in ("0", "1"))

    run_step(release, steps["convert"], None)
    (converted,) = results.glob("checkpoint-*.hf_model")
    assert converted.name == "checkpoint-30.hf_model"
    _assert_merged(release, converted)

    run_step(release, steps["evaluate"], None)
    _assert_evaluated(json.loads((results / "checkpoint-30" / "evaluation.json").read_text()))


def test_lightning_eks_pipeline_runs_step_by_step(tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="the pytorch_lightning scripts need lightning (the frameworks extra)")
    release, steps = _release(tmp_path, FRAMEWORKS / "pytorch_lightning" / "pipeline-eks.yaml")
    model_step_as_rendered(steps["model"])
    out = run_step(release, steps["model"], None)
    _assert_tiny_model(release, out)

    out = run_step(release, steps["fine-tune"], fine_tune_sizes(steps["fine-tune"], LIGHTNING_STEPS))
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out and "ok: PyTorchJob/" in out
    master = next((release.root / "logs" / "fine-tune").glob("*-master-0/pytorch.log")).read_text()
    assert "2 node(s) x 1 process(es)" in master and "max_steps 30" in master, master[-3000:]
    train = _metric(release, "train_loss_step")
    assert len(train) >= 5 and train[-1] < train[0] - 0.3, train
    assert all((release.home() / "logs" / node / "fine-tune.log").is_file() for node in ("0", "1"))
    checkpoints = release.home() / "results" / "tiny" / "qwen3" / "checkpoints"
    (ckpt,) = checkpoints.glob("model-peft-lora-epoch=*-step=*.ckpt")

    run_step(release, steps["convert"], None)
    (converted,) = checkpoints.glob("model-peft-lora-*.hf_model")
    assert converted.name == ckpt.name.removesuffix(".ckpt") + ".hf_model"
    _assert_merged(release, converted)

    run_step(release, steps["evaluate"], None)
    _assert_evaluated(json.loads(ckpt.with_name(ckpt.name.removesuffix(".ckpt") + ".evaluation.json").read_text()))


def without_runtime_env_pip(step: Step) -> dict:
    """The overlay emptying a ray_train EKS step's runtime env: its pip list (torch 2.10.0 with its CUDA wheels,
    GBs, and the reference's libraries from PyPI) is not installed; the Ray image's environment here has them."""
    ray = yaml.safe_load(step.recipes[-1].read_text())["ray"]
    assert "pip:" in ray["runtime_env_yaml"]["runtimeEnvYAML"], ray
    return {"ray": {"runtime_env_yaml": {"runtimeEnvYAML": ""}}}


def test_ray_train_eks_pipeline_runs_step_by_step(tmp_path: Path) -> None:
    """``ray_train``'s EKS pipeline: model (Job, as rendered), fine-tune (RayJob: KubeRay's head and the p4d overlay's
    2 worker pods, Ray Train's 2 workers over gloo, one per worker pod; step counts cut), convert and evaluate
    (RayJobs whose drivers run on the head: the merged model, then vLLM's CPU build generating for the test split).
    Stand-in: each RayJob's runtime env pip list emptied (:func:`without_runtime_env_pip`)."""
    release, steps = _release(tmp_path, FRAMEWORKS / "ray_train" / "pipeline-eks.yaml")
    model_step_as_rendered(steps["model"])
    out = run_step(release, steps["model"], None)
    _assert_tiny_model(release, out)

    fine_tune = steps["fine-tune"]
    sizes = {**fine_tune_sizes(fine_tune, RAY_TRAIN_STEPS), **without_runtime_env_pip(fine_tune)}
    out = run_step(release, fine_tune, sizes)
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out and "ok: RayJob/" in out, out
    losses = _metric(release, "loss")
    assert len(losses) >= 5 and losses[-1] < losses[0] - 0.3, losses
    submitter = next((release.root / "logs" / "fine-tune").glob("*/ray-job-submitter.log")).read_text()
    assert "2 CPU worker(s), 1 CPU each, backend gloo" in submitter, submitter[-3000:]
    results = release.home() / "results" / "tiny-qwen3"
    checkpoints = sorted(p for p in results.glob("checkpoint_*") if p.is_dir())
    assert checkpoints and checkpoints[-1].name in ("checkpoint_000010", "checkpoint_000020"), sorted(results.iterdir())
    newest = checkpoints[-1]
    assert (newest / "checkpoint" / "adapter_config.json").is_file()  # a LoRA adapter, saved on the best eval loss
    assert list((release.home() / "logs").glob("*/fine-tune.log")), "the driver's log, teed on EFS"

    out = run_step(release, steps["convert"], without_runtime_env_pip(steps["convert"]))
    assert "nvidia.com/gpu requests of 1 rewritten to none" in out and "ok: RayJob/" in out, out
    _assert_merged(release, newest / "checkpoint.hf_model")

    out = run_step(release, steps["evaluate"], without_runtime_env_pip(steps["evaluate"]))
    assert "ok: RayJob/" in out, out
    (found,) = newest.rglob("evaluation.json")
    evaluation = json.loads(found.read_text())
    _assert_evaluated(evaluation)
    assert evaluation["generator"] == "vllm", evaluation


MEGATRON = FRAMEWORKS / "megatron"
#: The pretrain step's model and run cut for a CPU (``--option value`` replacing the p4de overlay's own).
PRETRAIN_SIZES = {"--num-layers": "2", "--hidden-size": "96", "--num-attention-heads": "3", "--seq-length": "64",
                  "--micro-batch-size": "4", "--global-batch-size": "8", "--train-iters": "30",
                  "--lr": "3e-3", "--min-lr": "3e-4", "--lr-warmup-iters": "2", "--log-interval": "5",
                  "--eval-interval": "15", "--eval-iters": "2", "--save-interval": "15", "--split": "90,5,5",
                  # the plain-torch GPT on CPU refuses megatron-core's parallelism and dropout
                  "--tensor-model-parallel-size": "1", "--hidden-dropout": "0.0", "--attention-dropout": "0.0"}
MEGATRON_CORE_ONLY = ("--use-distributed-optimizer",)


def serve_on_cpu(step: str) -> list[str]:
    """The ``--set`` giving a rayserve step's Ray pods the 1 GiB KV cache ``python -m mlrecipe.serve`` gives vLLM's CPU
    build: without ``VLLM_CPU_KVCACHE_SPACE`` that build takes ``gpu_memory_utilization`` (0.9) of this machine's
    memory for it."""
    return [f"{step}.ray.env[0].name=VLLM_CPU_KVCACHE_SPACE", f"{step}.ray.env[0].value=1"]


SERVE_ON_CPU = serve_on_cpu("serve")


def with_options(args: list[str], options: dict[str, str]) -> list[str]:
    """``args`` with each ``--option value`` of ``options`` given the new value (every option must be present)."""
    out, seen = [], set()
    for arg in args:
        option = arg.split(" ", 1)[0]
        if option in options:
            out.append(f"{option} {options[option]}")
            seen.add(option)
        else:
            out.append(arg)
    assert seen == set(options), f"the recipe no longer has {sorted(set(options) - seen)}"
    return out


def pipeline_stream(release: Release, pipeline: Path, names: tuple[str, ...], sets: list[str]) -> Path:
    """The manifests ``mlrecipe run PIPELINE --dry-run -b kubernetes --set STEP.key=value ...`` prints for the steps
    ``names`` (each step's part begins with its ``# step NAME (CHART)`` line), in their order, as one stream file:
    what the pipeline itself gives a later step (``MLRECIPE_SERVE_URL`` of a serving step) is in it."""
    argv = [str(BIN / "mlrecipe"), "run", str(pipeline), "--dry-run", "-b", "kubernetes"]
    argv += [word for expression in sets for word in ("--set", expression)]
    out = subprocess.run(argv, env=cli_env(release.root / "mlhome"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    parts = [p for p in re.split(r"(?m)^(?=# step )", out.stdout) if p.startswith("# step ")]
    chosen = [p for p in parts if p.split()[2] in names]
    assert [p.split()[2] for p in chosen] == list(names), [p.split()[2] for p in parts]
    stream = release.root / f"{'-'.join(names)}.yaml"
    stream.write_text("---\n".join(chosen))
    return stream


def test_megatron_eks_pipeline_runs_step_by_step(tmp_path: Path) -> None:
    """Every step of the example: tokenizer (Job: hf-snapshot, from a Hub stand-in on 127.0.0.1 serving the test
    corpus's tokenizer, without its ``pip3 install --upgrade huggingface-hub`` line: the environment has it and
    nothing is fetched from PyPI), data (MPIJob, 2 x 1, the Pile shards from a mirror on 127.0.0.1), pretrain
    (PyTorchJob 2 x 1 on CPU: the plain-torch GPT of the same script, without the overlay's tensor parallelism,
    distributed optimizer and dropout, which only megatron-core's path takes), evaluate (PyTorchJob as rendered:
    held-out perplexity below half an untrained model's), export (PyTorchJob as rendered), then serve and client in
    one harness run, as the pipeline renders them (``mlrecipe run --dry-run``: the client's ``MLRECIPE_SERVE_URL``
    is the RayService's serve Service): the RayService (KubeRay head and worker, Ray Serve's ``openai_api``
    application over vLLM's CPU build, float32) becomes Ready, then the client's greedy completions through it
    equal transformers' generate of the export token for token, and the ``VLLMDeployment`` replica runs on the
    worker pod, the only one with a GPU on EKS (the harness keeps KubeRay's ``num-gpus`` for a RayService's pods).
    The serve step's ``engine.config.max_model_len`` (2048, the GPT 5B's sequence) is cut to the CPU model's 64
    (``--set``): vLLM refuses a longer one."""
    pytest.importorskip("zstandard")
    pytest.importorskip("tokenizers")
    from tests.frameworks.megatron_data import ShardServer, make_corpus

    name, namespace, listed = pipeline_steps(MEGATRON / "pipeline-eks.yaml")
    steps = {s.name: s for s in listed}
    assert {"tokenizer", "data", "pretrain", "export"} <= set(steps), sorted(steps)
    release = Release(tmp_path, name, namespace)
    release.fsx.mkdir()
    release.efs.mkdir()
    corpus = make_corpus(tmp_path / "corpus", shards=4)
    model_id = yaml.safe_load(steps["tokenizer"].recipes[0].read_text())["hf_model_id"]
    with HubStandIn(model_id, corpus.tokenizer) as hub:
        run_step(release, steps["tokenizer"], {"pre_script": [], "env": [{"name": "HF_ENDPOINT", "value": hub.url}]})
    assert f"GET /api/models/{model_id}/revision/main" in hub.requests
    fetched = release.fsx / "pretrained-models" / model_id
    assert sorted(p.name for p in fetched.iterdir() if p.is_file()) == sorted(hub.files)
    eks_data = yaml.safe_load(steps["data"].recipes[-1].read_text())  # its env and args replace data.yaml's
    with ShardServer(corpus.shards) as server:
        env = [{**e, "value": server.url} if e["name"] == "PILE_URL" else e for e in eks_data["process"]["env"]]
        assert env != eks_data["process"]["env"], "the EKS data overlay no longer names PILE_URL"
        run_step(release, steps["data"], {
            "resources": {"nnodes": 2, "nproc_per_node": 1, "requests": {"cpu": "1"}, "limits": {}},
            "process": {"env": env},
            "launcher": {"args": with_options(eks_data["launcher"]["args"], {"--file-numbers": "0-3"})}})
        assert sorted(server.requests) == [f"/0{n}.jsonl.zst" for n in range(4)]
    results = release.fsx / name / "results"
    manifest = json.loads((release.fsx / name / "data" / "manifest.json").read_text())
    assert [p["file_number"] for p in manifest["prefixes"]] == [0, 1, 2, 3]

    pretrain = steps["pretrain"]
    args = list(yaml.safe_load(pretrain.recipes[-1].read_text())["train"]["args"])
    out = run_step(release, pretrain, {"resources": {"nnodes": 2, "nproc_per_node": 1, "requests": {"cpu": "1"}},
                                       "train": {"args": [a for a in with_options(args, PRETRAIN_SIZES)
                                                          if a not in MEGATRON_CORE_ONLY]}})
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out and "ok: PyTorchJob/" in out
    losses = _metric(release, "loss")
    assert len(losses) >= 4 and losses[-1] < losses[0], losses
    assert sorted(p.name for p in (results / "checkpoints").iterdir() if p.is_dir())[-1].endswith("30"), \
        sorted((results / "checkpoints").iterdir())

    out = run_step(release, steps["evaluate"], None)
    assert "nvidia.com/gpu requests of 1 rewritten to none" in out and "ok: PyTorchJob/" in out
    evaluation = json.loads((results / "evaluation.json").read_text())
    assert evaluation["iteration"] == 30 and evaluation["split"] == "test" and evaluation["device"] == "cpu"
    assert evaluation["perplexity"] < 0.5 * evaluation["untrained_perplexity"], evaluation
    assert _metric(release, "test_ppl") == [pytest.approx(evaluation["perplexity"])]

    run_step(release, steps["export"], None)
    config = json.loads((results / "hf" / "config.json").read_text())
    assert config["n_layer"] == 2 and config["n_embd"] == 96 and config["n_head"] == 3, config
    assert (results / "hf" / "model.safetensors").is_file()

    stream = pipeline_stream(release, MEGATRON / "pipeline-eks.yaml", ("serve", "client"),
                             [*SERVE_ON_CPU, f"serve.engine.config.max_model_len={config['n_positions']}"])
    client = next(o for o in yaml.safe_load_all(stream.read_text()) if o and o["kind"] == "PyTorchJob")
    env = client["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MLRECIPE_SERVE_URL",
            "value": f"http://{name}-serve-serve-svc.{namespace}.svc.cluster.local:8000"} in env, env
    out = run_stream(release, stream, "serve-client", timeout=900)
    assert "nvidia.com/gpu requests of 1 rewritten to none" in out, out
    assert (f"ok: RayService/{name}-serve: ready (Serve applications RUNNING: {name}; {name}-serve-serve-svc "
            "answers)") in out, out
    assert f"ok: PyTorchJob/pytorchjob-{name}-client" in out, out
    assert "ray start's num-gpus kept from the GPU limits" in out, out
    placed = re.findall(r"/VLLMDeployment on (\S+?)[;\n]", out)
    assert len(placed) == 1 and "-worker-" in placed[0], (placed, out)  # the GPU worker, not the head
    served = json.loads((results / "served.json").read_text())
    assert served["identical"] and len(served["prompts"]) == 4, served
    assert all(row["served"] and row["served"] == row["transformers"] for row in served["prompts"]), served
    client_log = next((release.root / "logs" / "serve-client").glob(f"pytorchjob-{name}-client-master-0/pytorch.log"))
    assert "token-identical to transformers' on 4 prompts" in client_log.read_text()


EKS_TRAINING = EXAMPLES / "eks" / "training"
#: examples/eks/training's pretrain cut for a CPU, as PRETRAIN_SIZES (its recipe has no tensor parallelism or dropout).
EKS_PRETRAIN_SIZES = {k: v for k, v in PRETRAIN_SIZES.items()
                      if k not in ("--tensor-model-parallel-size", "--hidden-dropout", "--attention-dropout")}


def _metric_lines(release: Release) -> dict[Path, int]:
    """How many lines each metrics file of the release holds now."""
    root = release.fsx / ".mlrecipe" / release.namespace / release.name
    return {f: len(f.read_text().splitlines()) for f in root.glob("*/metrics.jsonl")}


def _metric_since(release: Release, key: str, before: dict[Path, int]) -> list[float]:
    """The values of ``key`` written to the release's metrics files after ``before`` (:func:`_metric_lines`)."""
    values = []
    for f in sorted(_metric_lines(release)):
        for line in f.read_text().splitlines()[before.get(f, 0):]:
            if line.strip() and key in json.loads(line).get("metrics", {}):
                values.append(json.loads(line)["metrics"][key])
    return values


def test_eks_training_example_tokenize_pretrain_finetune(tmp_path: Path) -> None:
    """``examples/eks/training``: tokenizer (Job, hf-snapshot from the Hub stand-in, without its pip line), tokenize
    (MPIJob 2 x 1, the framework's Megatron ``data/prepare.py`` over 4 Pile shards from a mirror on 127.0.0.1, one
    tokenizer worker per rank), pretrain (PyTorchJob 2 x 1: ``gpt/pretrain.py``, the plain-torch GPT on CPU, from
    the tokenize step's manifest, sizes cut, without the megatron-core-only distributed optimizer), model (Job, the
    tiny model) and finetune (PyTorchJob 1 x 2: accelerate ``text/peft_accelerate.py``, without the recipe's
    ``pip3 install`` line and ``--mixed_precision bf16``, step counts cut)."""
    pytest.importorskip("zstandard")
    pytest.importorskip("tokenizers")
    from tests.frameworks.megatron_data import ShardServer, make_corpus

    name, namespace, listed = pipeline_steps(EKS_TRAINING / "pipeline.yaml")
    steps = {s.name: s for s in listed}
    assert list(steps) == ["tokenizer", "tokenize", "pretrain", "model", "finetune"], list(steps)
    release = Release(tmp_path, name, namespace)
    release.fsx.mkdir()
    release.efs.mkdir()
    corpus = make_corpus(tmp_path / "corpus", shards=4)
    model_id = yaml.safe_load(steps["tokenizer"].recipes[0].read_text())["hf_model_id"]
    with HubStandIn(model_id, corpus.tokenizer) as hub:
        run_step(release, steps["tokenizer"], {"pre_script": [], "env": [{"name": "HF_ENDPOINT", "value": hub.url}]})

    (tokenize,) = (yaml.safe_load(r.read_text()) for r in steps["tokenize"].recipes)
    assert tokenize["framework"] == "megatron" and "git" not in tokenize
    with ShardServer(corpus.shards) as server:
        env = [{**e, "value": server.url} if e["name"] == "PILE_URL" else e for e in tokenize["process"]["env"]]
        assert env != tokenize["process"]["env"], "the tokenize recipe no longer names PILE_URL"
        out = run_step(release, steps["tokenize"], {
            "resources": {"nnodes": 2, "nproc_per_node": 1, "requests": {"cpu": "1"}, "limits": {}},
            "process": {"env": env},
            "launcher": {"args": with_options(tokenize["launcher"]["args"], {"--workers": "1"})}})
        assert sorted(server.requests) == [f"/0{n}.jsonl.zst" for n in range(4)]
    assert "ok: MPIJob/" in out, out
    manifest = json.loads((release.fsx / name / "data" / "manifest.json").read_text())
    assert [p["file_number"] for p in manifest["prefixes"]] == [0, 1, 2, 3]

    (pretrain,) = (yaml.safe_load(r.read_text()) for r in steps["pretrain"].recipes)
    assert pretrain["framework"] == "megatron" and "git" not in pretrain
    args = [a for a in with_options(pretrain["launcher"]["args"], EKS_PRETRAIN_SIZES) if a not in MEGATRON_CORE_ONLY]
    out = run_step(release, steps["pretrain"], {
        "resources": {"nnodes": 2, "nproc_per_node": 1, "requests": {"cpu": "1"}}, "launcher": {"args": args}})
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out and "ok: PyTorchJob/" in out
    losses = _metric_since(release, "loss", {})
    assert len(losses) >= 4 and losses[-1] < losses[0], losses
    checkpoints = release.home() / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir() if p.is_dir())[-1].endswith("30"), sorted(checkpoints.iterdir())

    out = run_step(release, steps["model"], None)
    _assert_tiny_model(release, out)

    (finetune,) = (yaml.safe_load(r.read_text()) for r in steps["finetune"].recipes)
    assert finetune["framework"] == "accelerate" and "git" not in finetune
    pre_script = [line for line in finetune["pre_script"] if not line.startswith("pip3 install")]
    assert len(pre_script) == len(finetune["pre_script"]) - 1, finetune["pre_script"]
    before = _metric_lines(release)
    out = run_step(release, steps["finetune"], {
        "resources": {"nnodes": 1, "nproc_per_node": 2, "requests": {"cpu": "1"}}, "pre_script": pre_script,
        "launcher": {"options": [], "args": with_flags(finetune["launcher"]["args"], ACCELERATE_STEPS)}})
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out and "ok: PyTorchJob/" in out
    losses = _metric_since(release, "loss", before)
    assert len(losses) >= 5 and losses[-1] < losses[0] - 0.3, losses
    assert (release.home() / "results" / "tiny" / "qwen3" / "checkpoint-30" / "rng_state_1.pth").is_file()
    assert (release.home() / "logs" / "0" / "finetune.log").is_file()


SERVING = EXAMPLES / "eks" / "serving"
#: The token of the ``hf-token`` Secret here: a dummy (the Hub stand-in takes any), never to be seen in a log.
HF_TOKEN = "hf_harnessDummyToken0123456789abcdefXYZ"
TRITON_STAND_IN = Path(__file__).with_name("triton_vllm_stand_in.py")
#: A client pod (the Python image): waits (bounded) for ``BASE + READY`` to answer 200, sends ``BODY`` to
#: ``BASE + ROUTE`` and writes the JSON answer to ``ANSWER`` (argv: BASE READY ROUTE BODY ANSWER).
CLIENT = """\
import json, sys, time, urllib.request
base, ready, route, body, answer = sys.argv[1:6]
deadline = time.monotonic() + 900
last = None
while True:
    try:
        with urllib.request.urlopen(base + ready, timeout=10) as response:
            if response.status == 200:
                break
    except OSError as exc:
        last = exc
    if time.monotonic() > deadline:
        sys.exit(f"{base}{ready} did not answer within 900 s: {last}")
    time.sleep(2)
request = urllib.request.Request(base + route, data=body.encode(), headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=600) as response:
    got = json.loads(response.read())
print(json.dumps(got), flush=True)
with open(answer, "w") as f:
    json.dump(got, f)
"""
PROMPT = "Repeat the color twice.\nred"


def user_secret(pipeline: Path, token: str) -> dict:
    """The Secret the pipeline's comment tells users to create (``kubectl create secret generic NAME -n NS
    --from-literal=KEY=...``), as that command creates it, with ``token`` as the value."""
    found = re.search(r"kubectl create secret generic (\S+) -n (\S+) --from-literal=(\w+)=", pipeline.read_text())
    assert found, f"{pipeline} no longer says how to create the token's Secret"
    name, namespace, key = found.groups()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque", "data": {key: base64.b64encode(token.encode()).decode()}}


def client_job(name: str, namespace: str, base: str, ready: str, route: str, body: dict, answer: str) -> dict:
    """A Job whose pod runs :data:`CLIENT` against ``base`` (a Service's cluster DNS name), the answer on ``pv-fsx``."""
    container = {"name": "client", "image": "public.ecr.aws/docker/library/python:slim-bullseye",
                 "command": ["python3", "-c", CLIENT, base, ready, route, json.dumps(body), answer],
                 "volumeMounts": [{"name": "fsx", "mountPath": "/fsx"}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [container],
                "volumes": [{"name": "fsx", "persistentVolumeClaim": {"claimName": "pv-fsx"}}]}}}}


def with_objects(stream: Path, before: list[dict], after: list[dict]) -> list[dict]:
    """Put ``before`` ahead of the stream's documents and ``after`` behind them; the stream's own objects."""
    text = stream.read_text()
    own = [o for o in yaml.safe_load_all(text) if o]
    stream.write_text("".join(yaml.safe_dump(o, sort_keys=False) + "---\n" for o in before) + text
                      + "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in after))
    return own


def tiny_chat_model(root: Path) -> Path:
    """The Hub stand-in's repository: a tiny Llama made from a config by the framework examples' script
    (``make_tiny_model.py``, hidden size 128 for vLLM's CPU kernels) with the quickstart's chat template as its
    ``chat_template.jinja``, as an instruct model's repository has one (chat completions need it)."""
    model = root / "model"
    root.mkdir(parents=True, exist_ok=True)
    script = root / "make_tiny_model.py"  # run alone, as from /etc/framework-scripts: its folder has an accelerate/
    shutil.copyfile(REPO / "src" / "mlrecipe_scripts" / script.name, script)
    subprocess.run([sys.executable, str(script), "--model-dir",
                    str(model), "--data-dir", str(root / "data"), "--architecture", "llama", "--hidden-size", "128"],
                   check=True, capture_output=True, text=True, timeout=300)
    shutil.copyfile(EXAMPLES / "quickstart" / "chat_template.jinja", model / "chat_template.jinja")
    return model


def _holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_eks_serving_example_snapshot_triton_rayserve(tmp_path: Path) -> None:
    """``examples/eks/serving``, step by step as one release: snapshot (Job: hf-snapshot as rendered but for its
    ``pip3 install`` line, from the Hub stand-in serving a tiny Llama with a chat template under the recipe's model
    id; the token from the Secret ``hf-token`` created in the stream as the pipeline's comment tells users to, with a
    dummy value: the Hub got it as ``Bearer``, and no file the run leaves, harness logs included, nor the harness's
    output holds it), then each server with a client Job in one harness run, as ``mlrecipe run --dry-run`` renders
    the step (objects named after release and step), the client reaching the server's Service by its cluster DNS
    name: triton (Deployment: the rendered ``pre_script`` writes the model repository, ``backend: "vllm"``, and the
    container runs :mod:`tests.kubelet_runs.triton_vllm_stand_in` with the rendered ``tritonserver`` args, because
    Triton's vLLM backend cannot run here (that module says why); Ready by its probe, a ``generate`` answered) and
    rayserve (RayService: KubeRay head and worker, Ray Serve's ``openai_api`` application over vLLM 0.32's CPU build
    reading the snapshot; Ready, its ``VLLMDeployment`` replica (``num_gpus: 8``) on the worker pod, whose ``ray
    start`` keeps KubeRay's ``--num-gpus=8``; a chat completion answered through the serve Service with the
    snapshot's chat template). The rayserve step's ``engine.config`` gets ``tensor_parallel_size`` 1 and the tiny
    model's ``max_model_len`` (512 for 8192) and its Ray pods ``VLLM_CPU_KVCACHE_SPACE=1`` (``--set``)."""
    pytest.importorskip("tokenizers")
    name, namespace, listed = pipeline_steps(SERVING / "pipeline.yaml")
    steps = {s.name: s for s in listed}
    assert list(steps) == ["snapshot", "triton", "rayserve"], list(steps)
    release = Release(tmp_path, name, namespace)
    release.fsx.mkdir()
    release.efs.mkdir()
    (release.fsx / "answers").mkdir()
    (snapshot,) = (yaml.safe_load(r.read_text()) for r in steps["snapshot"].recipes)
    model_id = snapshot["hf_model_id"]
    secret = user_secret(SERVING / "pipeline.yaml", HF_TOKEN)
    assert secret["metadata"] == {"name": snapshot["hf_secret_name"], "namespace": namespace}, secret

    with HubStandIn(model_id, tiny_chat_model(tmp_path / "hub")) as hub:
        stream = render_step(release, steps["snapshot"],
                             {"pre_script": [], "env": [{"name": "HF_ENDPOINT", "value": hub.url}]})
        job = next(o for o in with_objects(stream, [secret], []) if o["kind"] == "Job")
        env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in env, env
        out = run_stream(release, stream, "snapshot")
    assert "ok: Job/" in out, out
    assert f"GET /api/models/{model_id}/revision/main" in hub.requests
    sent = list(zip(hub.requests, hub.authorizations, strict=True))
    assert {a for r, a in sent if model_id in r} == {f"Bearer {HF_TOKEN}"}, sent  # each of the model's requests
    fetched = release.fsx / "pretrained-models" / model_id
    assert sorted(p.name for p in fetched.iterdir() if p.is_file()) == sorted(hub.files)
    assert HF_TOKEN not in out and not _holding(tmp_path, HF_TOKEN), _holding(tmp_path, HF_TOKEN)

    (release.fsx / TRITON_STAND_IN.name).write_text(TRITON_STAND_IN.read_text())
    stand_in = ["triton.server.command[0]=python3", f"triton.server.command[1]=/fsx/{TRITON_STAND_IN.name}"]
    stream = pipeline_stream(release, SERVING / "pipeline.yaml", ("triton",), stand_in)
    objects = [o for o in yaml.safe_load_all(stream.read_text()) if o]
    (service,) = (o["metadata"]["name"] for o in objects if o["kind"] == "Service")
    (deployment,) = (o["metadata"]["name"] for o in objects if o["kind"] == "Deployment")
    with_objects(stream, [], [client_job(
        "client-triton", namespace, f"http://{service}.{namespace}.svc.cluster.local:8000", "/v2/health/ready",
        "/v2/models/llama3/generate", {"text_input": PROMPT, "parameters": {"max_tokens": 8}},
        "/fsx/answers/triton.json")])
    out = run_stream(release, stream, "triton")
    assert "nvidia.com/gpu requests of 4 rewritten to none" in out, out
    assert f"ok: Deployment/{deployment}: ready" in out and "ok: Job/client-triton" in out, out
    server_log = "".join(p.read_text() for p in (release.root / "logs" / "triton").glob(f"{deployment}-*/*.log"))
    assert (f"model llama3 (backend vllm) loaded from /fsx/pretrained-models/{model_id}; model.json "
            '{"model": "/fsx/pretrained-models/meta-llama/Meta-Llama-3-8B-Instruct", "tensor_parallel_size": 4, '
            '"max_model_len": 8192}') in server_log, server_log[-3000:]
    answer = json.loads((release.fsx / "answers" / "triton.json").read_text())
    assert answer["model_name"] == "llama3" and answer["text_output"].startswith(PROMPT), answer
    assert len(answer["text_output"]) > len(PROMPT), answer

    config = json.loads((fetched / "config.json").read_text())
    stream = pipeline_stream(release, SERVING / "pipeline.yaml", ("rayserve",), [
        *serve_on_cpu("rayserve"), "rayserve.engine.config.tensor_parallel_size=1",
        f"rayserve.engine.config.max_model_len={config['max_position_embeddings']}"])
    objects = [o for o in yaml.safe_load_all(stream.read_text()) if o]
    (rayservice,) = (o["metadata"]["name"] for o in objects if o["kind"] == "RayService")
    engine = next(json.loads(o["data"]["engine-config.json"]) for o in objects
                  if o["kind"] == "ConfigMap" and "engine-config.json" in (o.get("data") or {}))
    assert engine["tensor_parallel_size"] == 1 and engine["max_model_len"] == 512, engine
    model = engine["served_model_name"]
    messages = [{"role": "user", "content": PROMPT}]
    with_objects(stream, [], [client_job(
        "client-rayserve", namespace, f"http://{rayservice}-serve-svc.{namespace}.svc.cluster.local:8000",
        "/v1/models", "/v1/chat/completions",
        {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0}, "/fsx/answers/rayserve.json")])
    out = run_stream(release, stream, "rayserve", timeout=900)
    assert "nvidia.com/gpu requests of 8 rewritten to none" in out, out
    assert (f"ok: RayService/{rayservice}: ready (Serve applications RUNNING: llama3; {rayservice}-serve-svc "
            "answers)") in out, out
    assert "ok: Job/client-rayserve" in out, out
    assert "ray start's num-gpus kept from the GPU limits" in out, out
    placed = re.findall(r"/VLLMDeployment on (\S+?)[;\n]", out)
    assert len(placed) == 1 and "-worker-" in placed[0], (placed, out)  # the 8-GPU worker, not the head
    answer = json.loads((release.fsx / "answers" / "rayserve.json").read_text())
    (choice,) = answer["choices"]
    assert answer["model"] == model and choice["message"]["role"] == "assistant", answer
    assert isinstance(choice["message"]["content"], str) and answer["usage"]["completion_tokens"] >= 1, answer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(fetched)
    templated = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert answer["usage"]["prompt_tokens"] == len(tokenizer(templated, add_special_tokens=False)["input_ids"]), (
        answer, templated)  # the snapshot's chat template made the prompt


NEURON = EXAMPLES / "eks" / "neuron"
NEURON_STAND_IN = Path(__file__).with_name("neuron_stand_in.py")
#: Stand-ins of the other files of neuronx-distributed the recipe uses, at their paths in that repository.
NEURON_REPO = Path(__file__).with_name("neuronx_distributed")
#: The compile and pretrain steps' sizes cut for 2 nodes x 1 process: tensor parallel 2 (a world of 2, one
#: data-parallel rank), a global batch of 1 (one micro-batch a step), 200 steps (checkpoints at 100 and 200).
NEURON_SIZES = {"TP_DEGREE": "2", "GBS": "1", "TOTAL_STEPS": "200"}
NEURON_DATA = "examples_datasets/wikicorpus_llama2_tokenized_4k"


def neuron_repo_files(script: str) -> dict[str, str]:
    """The stand-in neuronx-distributed repository: :data:`NEURON_REPO`'s files, the pretraining stand-in at
    ``script``."""
    files = {p.relative_to(NEURON_REPO).as_posix(): p.read_text() for p in sorted(NEURON_REPO.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts}
    return {**files, script: NEURON_STAND_IN.read_text()}


def without_pip(pre_script: list[str]) -> list[str]:
    """``pre_script`` without its one ``pip3 install`` line (nothing from PyPI: the environment has the packages)."""
    kept = [line for line in pre_script if not line.startswith("pip3 install")]
    assert len(kept) == len(pre_script) - 1, pre_script
    return kept


def recipe_values(step: Step) -> dict:
    """The step's recipe files merged in order (maps merge, other values replace)."""
    from mlrecipe.spec.values import deep_merge

    values: dict = {}
    for recipe in step.recipes:
        values = deep_merge(values, yaml.safe_load(recipe.read_text()))
    return values


def neuron_overlay(step: Step, repo: GitStandIn) -> dict:
    """A Neuron step's overlay: its pipeline name, the stand-in repository at its commit, no ``pip3 install``; for
    the PyTorchJobs 2 nodes x 1 process and :data:`NEURON_SIZES` in their env."""
    values = recipe_values(step)
    assert values["git"]["repo_url"] == "https://github.com/aws-neuron/neuronx-distributed.git", values["git"]
    overlay: dict = {"step_name": step.name, "git": {"repo_url": repo.url, "commit": repo.commit},
                     "pre_script": without_pip(values["pre_script"])}
    if "train" in values:
        env = [{**e, "value": NEURON_SIZES[e["name"]]} if e["name"] in NEURON_SIZES else e
               for e in values["train"]["env"]]
        assert {e["name"] for e in env} >= set(NEURON_SIZES), env
        overlay |= {"resources": {"nnodes": 2, "nproc_per_node": 1}, "train": {"env": env}}
    return overlay


def _neuron_reports(release: Release, step: str) -> list[dict]:
    """What each rank of ``step`` saw (:mod:`tests.kubelet_runs.neuron_stand_in`), by rank."""
    found = sorted((release.home() / "neuron-stand-in" / step).glob("rank-*.json"))
    return [json.loads(f.read_text()) for f in found]


def test_neuron_eks_pipeline_tokenizer_dataset_compile_pretrain(tmp_path: Path) -> None:
    """``examples/eks/neuron``, its four steps one after the other with the release's claims, each rendered as the
    pipeline renders it (its recipe files, its step name) plus an overlay. Stand-ins: the Hub (a server on 127.0.0.1
    serving a tiny Llama's tokenizer and config under the recipe's model id; the token from the Secret ``hf-token``
    created in the stream as the pipeline's comment says, a dummy); ``git.repo_url`` (a repository on 127.0.0.1 at
    the recipe's branch, its commit given as ``git.commit``: :mod:`.git_stand_in`) holding at their paths
    neuronx-distributed's ``get_dataset.py``, the modules the training script imports and its model config
    (``tests/kubelet_runs/neuronx_distributed/``) and the training script (:mod:`.neuron_stand_in`);
    ``neuron_parallel_compile`` (the neuronx image's, ``tests/kubelet/image_bin/neuronx``); the pre_scripts' ``pip3
    install`` lines left out; compile and pretrain 2 nodes x 1 process with ``TP_DEGREE`` 2, ``GBS`` 1 and
    ``TOTAL_STEPS`` 200 (the harness drops the Neuron and EFA requests and says so). Neuron's compiler and runtime
    do not run. Checked: the tokenizer's files fetched with the token and without weights; the dataset step's
    ``get_dataset.py`` found the tokenizer the pre_script copied next to it and saved 3 rows of 4096 tokens on FSx;
    compile's ranks ran under ``neuron_parallel_compile`` (``NEURON_EXTRACT_GRAPHS_ONLY=1`` from it, not from the
    recipe) with every argument the script needs and the modules copied next to it, and left their graph in the
    Neuron cache on EFS both extracted and compiled (``model.neff``, ``model.done``, no lock), no checkpoint;
    pretrain's ranks found that graph compiled, read the dataset (4096 tokens a step on each rank), ran 200 steps and
    saved checkpoints at 100 and 200, keeping the newest only; the rendezvous, the operator's and torchrun's env and
    the recipe's across both steps."""
    pytest.importorskip("tokenizers")
    datasets = pytest.importorskip("datasets")
    name, namespace, listed = pipeline_steps(NEURON / "pipeline.yaml")
    steps = {s.name: s for s in listed}
    assert list(steps) == ["tokenizer", "dataset", "compile", "pretrain"], list(steps)
    release = Release(tmp_path, name, namespace)
    release.fsx.mkdir()
    release.efs.mkdir()
    home = f"/efs/home/{name}"

    (tokenizer,) = (yaml.safe_load(r.read_text()) for r in steps["tokenizer"].recipes)
    model_id = tokenizer["hf_model_id"]
    secret = user_secret(NEURON / "pipeline.yaml", HF_TOKEN)
    assert secret["metadata"] == {"name": tokenizer["hf_secret_name"], "namespace": namespace}, secret
    with HubStandIn(model_id, tiny_chat_model(tmp_path / "hub")) as hub:
        stream = render_step(release, steps["tokenizer"], {
            "step_name": "tokenizer", "pre_script": [], "env": [{"name": "HF_ENDPOINT", "value": hub.url}]})
        with_objects(stream, [secret], [])
        out = run_stream(release, stream, "tokenizer")
    assert "ok: Job/" in out, out
    assert {a for r, a in zip(hub.requests, hub.authorizations, strict=True) if model_id in r} == {
        f"Bearer {HF_TOKEN}"}
    fetched = release.fsx / "pretrained-models" / model_id
    assert sorted(p.name for p in fetched.iterdir() if p.is_file()) == sorted(
        f for f in hub.files if not f.endswith(".safetensors")), "configs and tokenizer only (hf_tensors: false)"

    train = recipe_values(steps["pretrain"])
    script_dir = train["pre_script"][0].removeprefix("SCRIPT_DIR=$GIT_CLONE_DIR/")  # the script's folder
    assert script_dir != train["pre_script"][0], train["pre_script"]
    script = f"{script_dir}/" + next(a for a in train["train"]["args"] if a.endswith(".py"))
    branch = train["git"]["branch"]
    with GitStandIn(tmp_path / "git", "neuronx-distributed.git", neuron_repo_files(script), branch) as repo:
        out = run_step(release, steps["dataset"], neuron_overlay(steps["dataset"], repo))
        assert "ok: Job/" in out and "aws.amazon.com/neuron requests of 1 rewritten to none" in out, out
        data = datasets.load_from_disk(str(release.fsx / "home" / name / NEURON_DATA))
        assert len(data) == 3 and {len(r) for r in data["input_ids"]} == {4096}, data
        assert data["labels"] == data["input_ids"]

        streams = {}
        for step in ("compile", "pretrain"):
            streams[step] = render_step(release, steps[step], neuron_overlay(steps[step], repo))
            out = run_stream(release, streams[step], step)
            assert "aws.amazon.com/neuron requests of 16 rewritten to none" in out, out
            assert "vpc.amazonaws.com/efa limits of 8 rewritten to none" in out, out
            assert f"ok: PyTorchJob/pytorchjob-{name}-{step}" in out, out
            if step == "compile":
                assert not (release.home() / "checkpoints").exists(), sorted((release.home() / "checkpoints").iterdir())
    # 5 pods (dataset, 2 x compile, 2 x pretrain), each cloning, then fetching the pinned commit
    assert sum(r.endswith("/info/refs?service=git-upload-pack") for r in repo.requests) == 2 * 5, repo.requests
    assert "NEURON_EXTRACT_GRAPHS_ONLY" not in streams["compile"].read_text()  # neuron_parallel_compile sets it

    compile_log = "".join(p.read_text() for p in (release.root / "logs" / "compile").glob("*/*.log"))
    assert compile_log.count("neuron_parallel_compile: 1 graph(s) in") == 2, compile_log[-3000:]
    cache = release.home() / "neuron-cache"
    (module,) = cache.glob("neuronxcc-*/MODULE_*")
    assert sorted(p.name for p in module.iterdir()) == [
        "compile_flags.json", "model.done", "model.hlo_module.pb", "model.neff"], sorted(module.iterdir())
    assert not list(cache.rglob("*.lock"))
    container_module = f"{home}/neuron-cache/{module.relative_to(cache)}"

    sizes = {"tensor_parallel_size": 2, "seq_len": 4096, "batch_size": 1, "grad_accum_usteps": 1, "max_steps": 200,
             "use_mix_precision": True, "use_zero_1": True, "sequence_parallel_enabled": True,
             "selective_checkpoint_enabled": True}
    for step in ("compile", "pretrain"):
        reports = _neuron_reports(release, step)
        assert [r["rank"] for r in reports] == [0, 1], reports
        master = f"pytorchjob-{name}-{step}-master-0"
        for rank, seen in enumerate(reports):
            env, pod = seen["env"], master if rank == 0 else f"pytorchjob-{name}-{step}-worker-0"
            clone = f"{home}/tmp/{pod}"
            assert seen["hostname"] == pod and seen["world_size"] == 2 and seen["dp_size"] == 1, seen
            assert seen["script"] == f"{clone}/{script}" and seen["cwd"] == f"{clone}/{Path(script).parent}", seen
            assert env["GIT_CLONE_DIR"] == clone, env
            assert {k: env[k] for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "GROUP_RANK", "RANK",
                                        "LOCAL_RANK", "WORLD_SIZE", "PET_MASTER_ADDR", "MASTER_ADDR")} == {
                "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(rank), "GROUP_RANK": str(rank),
                "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2", "PET_MASTER_ADDR": master,
                "MASTER_ADDR": master}, env
            assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456", env
            assert env["HOME"] == home and env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1", env
            assert env["NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS"] == "3" and env["MLRECIPE_STEP"] == step, env
            args = seen["args"]
            assert {k: args[k] for k in sizes} == sizes, args
            assert args["model_path"] == f"{clone}/{Path(script).parent}/7B_config_llama2", args
            assert args["data_dir"] == f"/fsx/home/{name}/{NEURON_DATA}", args
            assert seen["batch_shape"] == [1, 4096] and seen["dataset_rows"] == 3, seen
            assert seen["cache"] == container_module, (seen["cache"], container_module)
            if step == "compile":
                assert env["NEURON_EXTRACT_GRAPHS_ONLY"] == "1" and seen["mode"] == "extract-graphs", seen
                assert args["steps_this_run"] == 2 and seen["steps"] == 2 and not seen["checkpoints_saved"], seen
                assert args["checkpoint_dir"] is None, args
            else:
                assert env["NEURON_EXTRACT_GRAPHS_ONLY"] is None and seen["mode"] == "train", seen
                assert seen["cache_hit"], "pretrain found compile's graph compiled"
                assert args["steps_this_run"] == 200 and seen["steps"] == 200 and seen["resumed_from"] == 0, seen
                assert seen["tokens"] == [2 * 4096.0] * 200, seen["tokens"][:5]  # each rank's micro-batch, reduced
                assert args["checkpoint_dir"] == f"{home}/checkpoints" and args["checkpoint_freq"] == 100, args
                assert args["num_kept_checkpoint"] == 1 and args["loading_step"] == "latest_if_exists", args
                assert seen["checkpoints_saved"] == ["step_100", "step_200"], seen
    checkpoints = release.home() / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["newest", "step_200"], sorted(checkpoints.iterdir())
    assert sorted(p.name for p in (checkpoints / "step_200").iterdir()) == ["rank-0.pt", "rank-1.pt"]
    assert (checkpoints / "newest").read_text() == "step_200\n"


def test_neuron_stand_ins_refuse_what_the_real_programs_would(tmp_path: Path) -> None:
    """The training stand-in stops with one ``error:`` line where the real script would fail: a module it imports
    not copied next to it, a required argument missing; ``get_dataset.py``'s without a tokenizer in its folder."""
    folder = tmp_path / "script"
    folder.mkdir()
    script = folder / "tp_zero1_llama_hf_pretrain.py"
    shutil.copyfile(NEURON_STAND_IN, script)
    given = ["--model_path", str(tmp_path), "--data_dir", str(tmp_path), "--max_steps", "4"]

    def run(*argv: str, cwd: Path = folder) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=120)

    done = run(str(script), *given)
    assert done.returncode != 0 and "error: --steps_this_run not given" in done.stderr, done.stderr
    done = run(str(script), *given, "--steps_this_run", "-1")
    assert done.returncode != 0, done.stderr
    assert "error: logger.py, modeling_llama_nxd.py, training_utils.py not in" in done.stderr, done.stderr
    for module in ("modeling_llama_nxd.py", "training_utils.py"):
        shutil.copyfile(NEURON_REPO / "examples" / "training" / "llama" / module, folder / module)
    shutil.copyfile(NEURON_REPO / "examples" / "training" / "llama" / "tp_zero1_llama_hf_pretrain" / "logger.py",
                    folder / "logger.py")
    done = run(str(script), *given, "--steps_this_run", "-1")
    assert done.returncode != 0 and f"error: --model_path {tmp_path}: no config.json" in done.stderr, done.stderr

    get_dataset = NEURON_REPO / "examples" / "training" / "llama" / "get_dataset.py"
    done = run(str(get_dataset), "--llama-version", "2")
    assert done.returncode != 0 and "error: no tokenizer in the working directory" in done.stderr, done.stderr
