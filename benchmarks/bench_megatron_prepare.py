"""Preprocessing throughput of ``framework: megatron``'s ``data/prepare.py``: 1 vs 2 ranks, and vs megatron-core.

``--mode large-file`` (the default; issue 39): ONE generated ``.jsonl`` of ``--megabytes`` MB (Pile-shaped lines
from :mod:`~mlrecipe_scripts.megatron.data.sample_corpus`, dealt over and over) and a GPT-2-like byte-level BPE
tokenizer trained here (``--vocab-size``, default 50,257 as GPT-2's; what the corpus allows), ``--append-eod``,
``--workers 1`` per rank, only the preprocess stage; each configuration ``--repeats`` times, rotating, medians:

* ``single-process path``: 1 rank, the file whole (``--split-size`` above its size);
* ``1 rank, ranges`` / ``2 ranks, ranges``: the file cut into ``--range-mb`` MB byte ranges (the 2 ranks as
  processes with ``OMPI_COMM_WORLD_RANK``/``SIZE`` set by hand), merged in parallel into one ``.bin/.idx``;
* ``megatron-core loop``: the loop a user would write around megatron-core's ``IndexedDatasetBuilder`` (its
  ``tools/preprocess_data.py`` is not in the wheel) over the same file in one process, imports excluded;
* ``upstream preprocess_data.py``, only with ``MEGATRON_LM_DIR`` (a Megatron-LM checkout of the pinned megatron-core's
  tag): Megatron-LM's own script, ``--workers 1 --append-eod``, ``--tokenizer-type HuggingFaceTokenizer`` on the same
  tokenizer folder, wall from launch to exit (its imports included, as the script's start-up is); its bytes join the
  comparison. Its ``megatron.training`` imports triton: when this interpreter has none, ``.venv-vllm``'s is lent.

Printed per configuration: wall seconds (start-up and the manifest included for the script), MB/s and documents/s,
both also per worker (per rank x worker), the busiest rank's peak RSS (``ru_maxrss`` of ``wait4``); then the speed-up
of 2 ranks over the single-process path and over 1 rank with ranges (target >= 1.8x on 2 cores), and the
single-process path over the megatron-core loop and over upstream's script (target >= 1.0x). Bounded memory (issue 39
point 2): the single-process path and the 2 ranks also run on a file a quarter of the size, and both peak RSS are
printed with their difference (target < 20 %, and < 1 GiB); ``--memory-only`` does only that, on ``--megabytes`` and
a tenth of it (sizes a timed run cannot afford: e.g. 500 and 50 MB). The machine's ceiling for the same work is
measured in the same rounds: the megatron-core loop over the file's two halves in 1 process, then 2 at once (imports
excluded); the 2 ranks' speed-up is also printed as a share of it. The bytes of every run's ``.bin/.idx`` are
compared.

``--mode shards`` (issue 27):
Data: Pile-shaped ``.jsonl.zst`` shards and a byte-level BPE tokenizer made here by
:mod:`mlrecipe_scripts.megatron.data.sample_corpus` (Python's own docs, ``--repeat`` times over), placed in each
run's data dir beforehand, so only the ``preprocess`` stage runs (streamed ``.zst`` -> JSON -> tokens -> ``.bin/.idx``,
``--append-eod``, ``--workers 1`` per rank).

* ``1 rank`` / ``2 ranks``: the chart tree's ``data/prepare.py`` as processes with ``OMPI_COMM_WORLD_RANK``/``SIZE``
  set by hand (what ``mpirun`` gives them), the same shards; wall time from launch to the last exit (start-up and
  rank 0's manifest included), and the CPU seconds of the busiest rank (what two idle cores would give). Target:
  2 ranks / 1 rank >= 1.8x on 2 cores.
* ``1 loop`` / ``2 loops at once``: the machine's own ceiling for this work, measured in the same rounds: the
  megatron-core loop below in 1 process over all shards, and in 2 processes at once over each half, imported first
  and started together (start-up excluded, so the ceiling is generous). Two busy vCPUs of a shared VM may not give
  2x; the script's 2-rank ratio is also printed as a share of this ceiling.
* ``script`` vs ``megatron-core loop``: the script's own per-shard preprocessing time (from its done-markers) with
  megatron-core's ``IndexedDatasetBuilder`` (``--writer megatron``) and with the built-in writer, against the minimal
  loop a user would write around megatron-core (its ``tools/preprocess_data.py`` is not in the wheel): zstandard's
  stream reader, ``json.loads``, the same ``tokenizers`` tokenizer, ``add_document`` per document, ``finalize``;
  one process (the same worker count), imports excluded on both sides; wall and CPU seconds (``process_time``,
  which other load on a shared machine barely moves). Target: script / loop >= 1.0x.

Each configuration runs ``--repeats`` times in rotating order; the medians are printed (figures go nowhere else).
Usage: ``python benchmarks/bench_megatron_prepare.py [--megabytes 64] [--range-mb 8] [--repeats 1]`` or
``... --mode shards [--shards 4] [--repeat 6] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
PREPARE = REPO / "charts" / "machine-learning" / "data-prep" / "mpijob-data-process" / "scripts" / "megatron" / \
    "data" / "prepare.py"

from mlrecipe_scripts.megatron.data import sample_corpus  # noqa: E402


def _env(rank: int, size: int, run: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI")) and k not in ("RANK",
                                                                                                   "WORLD_SIZE")}
    env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(size), OMPI_MCA_ess_base_jobid=run,
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return env


def _fresh(data: Path, shards: list[Path]) -> None:
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    for shard in shards:
        shutil.copyfile(shard, data / shard.name)


def run_script(work: Path, shards: list[Path], tokenizer: Path, ranks: int, writer: str) -> tuple[float, float, dict]:
    """Wall seconds of a ``ranks``-rank preparation, the CPU seconds of its busiest rank, and its manifest (plus
    the summed per-shard preprocessing seconds)."""
    data = work / f"data-{ranks}-{writer}"
    _fresh(data, shards)
    args = [sys.executable, str(PREPARE), "--file-numbers", f"0-{len(shards) - 1}", "--data-dir", str(data),
            "--tokenizer-dir", str(tokenizer), "--append-eod", "--stages", "preprocess", "--writer", writer]
    run = f"bench-{time.monotonic_ns()}"
    logs = [work / f"rank-{rank}.log" for rank in range(ranks)]
    start = time.perf_counter()
    procs = [subprocess.Popen(args, env=_env(rank, ranks, run), stdout=subprocess.DEVNULL, stderr=log.open("w"))
             for rank, log in zip(range(ranks), logs, strict=True)]
    cpu = []
    for proc, log in zip(procs, logs, strict=True):
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"prepare.py failed: {log.read_text()[-2000:]}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    wall = time.perf_counter() - start
    manifest = json.loads((data / "manifest.json").read_text())
    marks = [json.loads((data / f"{p['prefix']}.done").read_text()) for p in manifest["prefixes"]]
    manifest["shard_seconds"] = sum(m["seconds"] for m in marks)
    manifest["shard_cpu_seconds"] = sum(m["cpu_seconds"] for m in marks)
    return wall, max(cpu), manifest


def run_loop(work: Path, shards: list[Path], tokenizer: Path) -> tuple[float, float, int, int]:
    """The hand-written megatron-core loop over the same shards: (seconds, CPU seconds, documents, tokens)."""
    import io

    import numpy as np
    import zstandard
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    eod = tok.token_to_id("<|endoftext|>")
    dtype = DType.optimal_dtype(tok.get_vocab_size())
    out = work / "loop"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    documents = tokens = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for shard in shards:
        prefix = out / f"loop_{shard.name.split('.')[0]}_text_document"
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
        with shard.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            for line in io.TextIOWrapper(reader, encoding="utf-8"):
                text = json.loads(line)["text"]
                ids = [*tok.encode(text, add_special_tokens=False).ids, eod]
                builder.add_document(np.array(ids, dtype=dtype), [len(ids)])
                documents += 1
                tokens += len(ids)
        builder.finalize(f"{prefix}.idx")
    return time.perf_counter() - start, time.process_time() - cpu_start, documents, tokens


def _loop_child(work: Path, shards: list[Path], tokenizer: Path) -> None:
    """``--loop-child``: import, say ready, wait for the go line on stdin, run :func:`run_loop`, print its figures."""
    import megatron.core.datasets.indexed_dataset  # noqa: F401
    import tokenizers  # noqa: F401
    import zstandard  # noqa: F401

    print("ready", flush=True)
    sys.stdin.readline()
    seconds, cpu, docs, toks = run_loop(work, shards, tokenizer)
    print(json.dumps({"seconds": seconds, "cpu": cpu, "documents": docs, "tokens": toks}), flush=True)


def run_loops_at_once(work: Path, shards: list[Path], tokenizer: Path, processes: int) -> tuple[float, int, int]:
    """The machine's ceiling for this work: ``processes`` copies of the megatron-core loop, each on a contiguous
    share of the shards (as the script's ranks split them), imported first and then started together; seconds from
    the go to the last one's end (imports and start-up excluded), documents, tokens."""
    bounds = [len(shards) * i // processes for i in range(processes + 1)]
    procs = []
    for i in range(processes):
        share = [str(s) for s in shards[bounds[i]:bounds[i + 1]]]
        procs.append(subprocess.Popen([sys.executable, __file__, "--loop-child", str(work / f"child-{i}"),
                                       str(tokenizer), *share], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                      "TOKENIZERS_PARALLELISM": "false"}))
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "a loop child failed to start"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    figures = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a loop child failed ({proc.returncode})")
        figures.append(json.loads(out.strip().splitlines()[-1]))
    return (max(f["seconds"] for f in figures), sum(f["documents"] for f in figures),
            sum(f["tokens"] for f in figures))


#: Linux keeps a process's peak RSS across exec, so a rank forked from this (large) process, or a wrapper forked
#: from it, would report this process's peak: each rank is started by a small interpreter that writes the peak RSS
#: of its children only (the rank, forked from the small wrapper) to the file named by its first argument.
RSS_WRAPPER = [sys.executable, "-S", "-c", "import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
               "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
               "sys.exit(code)"]


def write_large_file(path: Path, megabytes: float) -> tuple[int, int]:
    """One ``.jsonl`` of about ``megabytes`` MB: the sample corpus's documents as ``{"text": ...}`` lines, dealt over
    and over, streamed to disk; (bytes, documents)."""
    lines = [json.dumps({"text": text, "meta": {"pile_set_name": name}}).encode() + b"\n"
             for name, text in sample_corpus.documents()]
    target, written, documents = int(megabytes * 1e6), 0, 0
    with path.open("wb") as out:
        while written < target:
            for line in lines:
                out.write(line)
                written += len(line)
                documents += 1
                if written >= target:
                    break
    return written, documents


def run_large(work: Path, source: Path, tokenizer: Path, ranks: int, split: str) -> dict[str, float]:
    """``ranks`` ranks on the one file ``00.jsonl`` (``split``: the ``--split-size``); wall, busiest rank's peak RSS
    (bytes) and CPU seconds, documents, and the sha256 of the outputs."""
    data = work / f"data-{ranks}-{split}"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    os.link(source, data / "00.jsonl")  # the same file system: no copy
    args = [sys.executable, str(PREPARE), "--file-numbers", "0", "--data-dir", str(data), "--tokenizer-dir",
            str(tokenizer), "--append-eod", "--stages", "preprocess", "--shard-suffix", ".jsonl", "--split-size", split]
    run = f"bench-{time.monotonic_ns()}"
    logs = [work / f"rank-{rank}.log" for rank in range(ranks)]
    start = time.perf_counter()
    peaks = [work / f"rank-{rank}.maxrss" for rank in range(ranks)]
    procs = [subprocess.Popen([*RSS_WRAPPER, str(peak), *args], env=_env(rank, ranks, run), stdout=subprocess.DEVNULL,
                              stderr=log.open("w")) for rank, log, peak in zip(range(ranks), logs, peaks, strict=True)]
    rss, cpu = [], []
    for proc, log in zip(procs, logs, strict=True):
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"prepare.py failed: {log.read_text()[-2000:]}")
        rss.append(int(peaks[len(rss)].read_text()) * 1024)  # KiB on Linux
        cpu.append(usage.ru_utime + usage.ru_stime)
    wall = time.perf_counter() - start
    manifest = json.loads((data / "manifest.json").read_text())
    [entry] = manifest["prefixes"]
    digest = entry["bin"]["sha256"] + entry["idx"]["sha256"]
    shutil.rmtree(data, ignore_errors=True)
    return {"seconds": wall, "rss": max(rss), "cpu": max(cpu), "documents": manifest["documents"], "digest": digest}


def run_large_loop(source: Path, tokenizer: Path, work: Path) -> dict[str, float]:
    """The megatron-core loop over the plain ``.jsonl`` in this process (imports done before)."""
    import numpy as np
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    eod = tok.token_to_id("<|endoftext|>")
    dtype = DType.optimal_dtype(tok.get_vocab_size())
    documents = 0
    start = time.perf_counter()
    builder = IndexedDatasetBuilder(str(work / "loop.bin"), dtype=dtype)
    with source.open("rb") as stream:
        for line in stream:
            ids = [*tok.encode(json.loads(line)["text"], add_special_tokens=False).ids, eod]
            builder.add_document(np.array(ids, dtype=dtype), [len(ids)])
            documents += 1
    builder.finalize(str(work / "loop.idx"))
    from mlrecipe_scripts.megatron.data.fetch import sha256_file

    digest = sha256_file(work / "loop.bin") + sha256_file(work / "loop.idx")
    return {"seconds": time.perf_counter() - start, "rss": 0.0, "cpu": 0.0, "documents": documents, "digest": digest}


UPSTREAM = "upstream preprocess_data.py"


def _lent_triton(work: Path) -> str:
    """A folder to put on PYTHONPATH so that ``import triton`` works for upstream's ``megatron.training``: empty when
    this interpreter has triton, else one holding a link to ``.venv-vllm``'s (same Python, same torch)."""
    import importlib.util

    folder = work / "lent"
    folder.mkdir(exist_ok=True)
    found = sorted(REPO.glob(".venv-vllm/lib/python3*/site-packages/triton"))
    if importlib.util.find_spec("triton") is None and found and not (folder / "triton").exists():
        (folder / "triton").symlink_to(found[0])
    return str(folder)


def run_upstream(root: Path, source: Path, tokenizer: Path, work: Path) -> dict[str, float]:
    """Megatron-LM's ``tools/preprocess_data.py`` from ``root``, single-process, ``--workers 1``, on ``source``."""
    from mlrecipe_scripts.megatron.data.fetch import sha256_file

    out = work / "upstream"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    path = os.pathsep.join(p for p in (str(root), _lent_triton(work), os.environ.get("PYTHONPATH", "")) if p)
    env = {**_env(0, 1, "upstream"), "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    peak, log = work / "upstream.maxrss", work / "upstream.log"
    start = time.perf_counter()
    code = subprocess.call([*RSS_WRAPPER, str(peak), sys.executable, str(root / "tools" / "preprocess_data.py"),
                            "--input", str(source), "--output-prefix", str(out / "up"), "--append-eod", "--workers",
                            "1", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer),
                            "--log-interval", str(10**9)], env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    seconds = time.perf_counter() - start
    if code:
        raise SystemExit(f"upstream preprocess_data.py failed: {log.read_text()[-2000:]}")
    digest = sha256_file(out / "up_text_document.bin") + sha256_file(out / "up_text_document.idx")
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": seconds, "rss": int(peak.read_text()) * 1024, "cpu": 0.0, "digest": digest}


def write_halves(source: Path, work: Path) -> list[Path]:
    """``source`` cut at the line nearest its middle into two ``.jsonl.zst`` files (for the machine's ceiling)."""
    import zstandard

    data = source.read_bytes()
    middle = data.index(b"\n", len(data) // 2) + 1
    halves = []
    for i, part in enumerate((data[:middle], data[middle:])):
        path = work / f"half-{i}.jsonl.zst"
        path.write_bytes(zstandard.ZstdCompressor(level=1).compress(part))
        halves.append(path)
    return halves


def memory_only(args: argparse.Namespace, work: Path) -> int:
    """``--memory-only``: bounded memory (issue 39 point 2) on sizes a timed run cannot afford: the single-process
    path and 2 ranks with ranges, once each, on a file of ``--megabytes`` MB and on one of a tenth of it; peak RSS of
    the busiest rank (load does not move it)."""
    big, small = work / "big.jsonl", work / "small.jsonl"
    size, _ = write_large_file(big, args.megabytes)
    small_size, _ = write_large_file(small, args.megabytes / 10)
    tokenizer = sample_corpus.train_tokenizer(work / "tokenizer", args.vocab_size)
    ranged = f"{max(1, int(args.range_mb * 1e6))}"
    for name, ranks, splits in (("single-process path", 1, (str(10 * small_size), str(10 * size))),
                                ("2 ranks, ranges", 2, (ranged, ranged))):
        low, high = (run_large(work, source, tokenizer, ranks, split) for source, split in zip((small, big), splits,
                                                                                                   strict=True))
        print(f"peak RSS, {name}: {low['rss'] / 2**20:.1f} MiB on {small_size / 1e6:.1f} MB "
              f"({low['seconds']:.0f} s), {high['rss'] / 2**20:.1f} MiB on {size / 1e6:.1f} MB "
              f"({high['seconds']:.0f} s): "
              f"{abs(high['rss'] - low['rss']) / low['rss']:.1%} apart  (target < 20 %, < 1 GiB)", flush=True)
    return 0


def large_file(args: argparse.Namespace, work: Path) -> int:
    """``--mode large-file`` (the module docstring)."""
    import megatron.core.datasets.indexed_dataset  # noqa: F401  (imported once, outside every timing)

    big, small = work / "big.jsonl", work / "small.jsonl"
    size, docs = write_large_file(big, args.megabytes)
    small_size, _ = write_large_file(small, args.megabytes / 4)
    halves = write_halves(big, work)
    tokenizer = sample_corpus.train_tokenizer(work / "tokenizer", args.vocab_size)
    vocab = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
    whole, ranged = str(10 * size), f"{max(1, int(args.range_mb * 1e6))}"
    configs = {"single-process path": (1, whole), "1 rank, ranges": (1, ranged), "2 ranks, ranges": (2, ranged),
               "megatron-core loop": (0, ""), "ceiling: 1 loop": (-1, ""), "ceiling: 2 loops at once": (-2, "")}
    upstream = Path(os.environ["MEGATRON_LM_DIR"]) if os.environ.get("MEGATRON_LM_DIR") else None
    if upstream is not None:
        configs[UPSTREAM] = (1, "")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    names = list(configs)
    for round_ in range(args.repeats):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            ranks, split = configs[name]
            if name == UPSTREAM and upstream is not None:
                figures = run_upstream(upstream, big, tokenizer, work)
            elif ranks < 0:
                seconds, _, _ = run_loops_at_once(work, halves, tokenizer, -ranks)
                figures = {"seconds": seconds, "rss": 0.0, "cpu": 0.0}
            elif ranks == 0:
                figures = run_large_loop(big, tokenizer, work)
            else:
                figures = run_large(work, big, tokenizer, ranks, split)
            results[name].append(figures)
    digests = {r["digest"] for runs in results.values() for r in runs if "digest" in r}
    assert len(digests) == 1, "the runs wrote different .bin/.idx bytes"
    print(f"one file of {size / 1e6:.1f} MB, {docs} documents; tokenizer: byte-level BPE, {len(vocab)} tokens; "
          f"ranges of {args.range_mb} MB; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; median of "
          f"{args.repeats} run(s); every run's .bin/.idx identical")
    median = {name: statistics.median(r["seconds"] for r in runs) for name, runs in results.items()}
    cpu = {name: statistics.median(r["cpu"] for r in runs) for name, runs in results.items()}
    for name, (ranks, _) in configs.items():
        workers = max(abs(ranks), 1)
        seconds = median[name]
        rss = max(r["rss"] for r in results[name])
        print(f"  {name:20s} {seconds:7.2f} s  {size / 1e6 / seconds:6.2f} MB/s ({size / 1e6 / seconds / workers:5.2f} "
              f"per worker)  {docs / seconds:7.0f} documents/s ({docs / seconds / workers:6.0f} per worker)"
              + (f"  peak RSS {rss / 2**20:6.1f} MiB" if rss else "")
              + (f", busiest rank {cpu[name]:.2f} CPU s" if cpu[name] else ""))
    print(f"2 ranks / single-process path: {median['single-process path'] / median['2 ranks, ranges']:.2f}x; "
          f"2 ranks / 1 rank with ranges: {median['1 rank, ranges'] / median['2 ranks, ranges']:.2f}x  "
          f"(target >= 1.8x on 2 cores)")
    paired = [one["seconds"] / two["seconds"] for one, two in zip(results["single-process path"],
                                                                   results["2 ranks, ranges"], strict=True)]
    print(f"per round (runs made next to each other), 2 ranks / single-process path: "
          f"{', '.join(f'{r:.2f}x' for r in paired)}; median {statistics.median(paired):.2f}x")
    ranged_pairs = [one["seconds"] / two["seconds"] for one, two in zip(results["1 rank, ranges"],
                                                                         results["2 ranks, ranges"], strict=True)]
    print(f"per round, 2 ranks / 1 rank with ranges: {', '.join(f'{r:.2f}x' for r in ranged_pairs)}; median "
          f"{statistics.median(ranged_pairs):.2f}x")
    print(f"the same on idle cores (busiest rank's CPU s): {cpu['single-process path'] / cpu['2 ranks, ranges']:.2f}x "
          f"and {cpu['1 rank, ranges'] / cpu['2 ranks, ranges']:.2f}x")
    ceilings = [one["seconds"] / two["seconds"] for one, two in zip(results["ceiling: 1 loop"],
                                                                     results["ceiling: 2 loops at once"], strict=True)]
    ceiling = statistics.median(ceilings)
    print(f"this machine's ceiling for the same work (the megatron-core loop over the file's two halves: 1 process, "
          f"then 2 at once, imports and start-up excluded): {', '.join(f'{r:.2f}x' for r in ceilings)}; median "
          f"{ceiling:.2f}x; 2 ranks / 1 rank with ranges reach {statistics.median(ranged_pairs) / ceiling:.0%} of it, "
          f"2 ranks / single-process path {statistics.median(paired) / ceiling:.0%}")
    print(f"single-process path / megatron-core loop: "
          f"{median['megatron-core loop'] / median['single-process path']:.2f}x  (target >= 1.0x per worker)")
    if upstream is not None:
        print(f"single-process path / upstream preprocess_data.py --workers 1 (start-up included on both sides): "
              f"{median[UPSTREAM] / median['single-process path']:.2f}x  (target >= 1.0x per worker)")
    else:
        print(f"({UPSTREAM} not timed: set MEGATRON_LM_DIR to a Megatron-LM checkout of the pinned "
              f"megatron-core's tag)")
    for name, ranks, split in (("single-process path", 1, str(10 * small_size)), ("2 ranks, ranges", 2, ranged)):
        low = run_large(work, small, tokenizer, ranks, split)["rss"]
        high = max(r["rss"] for r in results[name])
        print(f"peak RSS, {name}: {low / 2**20:.1f} MiB on {small_size / 1e6:.1f} MB, {high / 2**20:.1f} MiB on "
              f"{size / 1e6:.1f} MB: {abs(high - low) / low:.1%} apart  (target < 20 %, < 1 GiB)")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--loop-child"]:
        out, tokenizer, *shard_paths = sys.argv[2:]
        Path(out).mkdir(parents=True, exist_ok=True)
        _loop_child(Path(out), [Path(s) for s in shard_paths], Path(tokenizer))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mode", choices=("large-file", "shards"), default="large-file")
    parser.add_argument("--megabytes", type=float, default=64.0, help="large-file: the file's size in MB")
    parser.add_argument("--range-mb", type=float, default=8.0, help="large-file: the byte ranges' size in MB")
    parser.add_argument("--vocab-size", type=int, default=50257, help="large-file: the BPE tokenizer's target size")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=6, help="the sample corpus dealt this many times over")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--memory-only", action="store_true",
                        help="large-file: only the peak RSS of 1 and 2 ranks on --megabytes MB and a tenth of it")
    parser.add_argument("--scaling-only", action="store_true",
                        help="only 1 vs 2 ranks and the machine's ceiling (more rounds in the same time)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-megatron-"))
    if args.mode == "large-file":
        try:
            return memory_only(args, work) if args.memory_only else large_file(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    try:
        shards = sample_corpus.write_shards(work / "mirror", args.shards, args.repeat)
        tokenizer = sample_corpus.train_tokenizer(work / "tokenizer")
        import megatron.core.datasets.indexed_dataset  # noqa: F401  (imported once, outside every timing)

        configs = ["1 rank", "2 ranks", "1 loop", "2 loops at once"]
        if not args.scaling_only:
            configs += ["script megatron", "script builtin", "loop"]
        results: dict[str, list[float]] = {c: [] for c in configs}
        busiest: dict[str, list[float]] = {c: [] for c in configs}  # CPU seconds (of the busiest rank)
        counts: dict[str, tuple[int, int]] = {}
        run_script(work, shards, tokenizer, 1, "builtin")  # warm-up (page cache, compiled bytecode)
        for round_ in range(args.repeats):
            for config in configs[round_ % len(configs):] + configs[:round_ % len(configs)]:
                if config == "loop":
                    seconds, cpu, docs, toks = run_loop(work, shards, tokenizer)
                    busiest[config].append(cpu)
                elif config.endswith("loop") or config.endswith("at once"):
                    seconds, docs, toks = run_loops_at_once(work, shards, tokenizer, int(config[0]))
                    busiest[config].append(seconds)
                elif config.startswith("script"):
                    _, _, manifest = run_script(work, shards, tokenizer, 1, config.split()[1])
                    seconds, docs, toks = manifest["shard_seconds"], manifest["documents"], manifest["tokens"]
                    busiest[config].append(manifest["shard_cpu_seconds"])
                else:
                    seconds, cpu, manifest = run_script(work, shards, tokenizer, int(config[0]), "builtin")
                    busiest[config].append(cpu)
                    docs, toks = manifest["documents"], manifest["tokens"]
                results[config].append(seconds)
                counts[config] = (docs, toks)
        assert len(set(counts.values())) == 1, f"the runs saw different data: {counts}"
        docs, toks = counts["1 rank"]
        load = os.getloadavg()[0]
        print(f"{args.shards} shards, {docs} documents, {toks} tokens; {os.cpu_count()} CPUs, load average {load:.1f}; "
              f"median of {args.repeats} runs each")
        median = {c: statistics.median(v) for c, v in results.items()}
        for config in configs:
            print(f"  {config:16s} {median[config]:7.2f} s  {docs / median[config]:9.0f} documents/s  "
                  f"{toks / median[config]:10.0f} tokens/s   (runs: {', '.join(f'{s:.2f}' for s in results[config])})")
        scaling = median["1 rank"] / median["2 ranks"]
        print(f"2 ranks / 1 rank (wall, start-up included): {scaling:.2f}x  (target >= 1.8x)")
        ceiling = median["1 loop"] / median["2 loops at once"]
        print(f"this machine's ceiling for the same work (2 megatron-core loops at once / 1, imports excluded): "
              f"{ceiling:.2f}x; the script's 2 ranks reach {scaling / ceiling:.0%} of it")
        per_round = [(one / two, one_loop / two_loops) for one, two, one_loop, two_loops in zip(
            results["1 rank"], results["2 ranks"], results["1 loop"], results["2 loops at once"], strict=True)]
        print("per round, 2 ranks / 1 rank vs the ceiling measured beside it: "
              + ", ".join(f"{a:.2f}x/{b:.2f}x" for a, b in per_round)
              + f"; medians {statistics.median(a for a, _ in per_round):.2f}x / "
              f"{statistics.median(b for _, b in per_round):.2f}x, share of the ceiling "
              f"{statistics.median(a / b for a, b in per_round):.0%}")
        cpu_1, cpu_2 = (statistics.median(busiest[c]) for c in ("1 rank", "2 ranks"))
        print(f"2 ranks / 1 rank on idle cores (CPU s of 1 rank {cpu_1:.2f} / busiest of 2 ranks {cpu_2:.2f}): "
              f"{cpu_1 / cpu_2:.2f}x")
        if args.scaling_only:
            return 0
        cpu = {c: statistics.median(v) for c, v in busiest.items()}
        for writer in ("megatron", "builtin"):
            ratio, cpu_ratio = (m["loop"] / m[f"script {writer}"] for m in (median, cpu))
            print(f"script ({writer} writer) / megatron-core loop: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU s "
                  f"({cpu[f'script {writer}']:.2f} vs {cpu['loop']:.2f})  (target >= 1.0x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
