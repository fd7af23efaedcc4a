"""Loading and validating recipes and pipelines into a :class:`ReleaseSpec` (pure data).

Every problem of every input is collected and reported at once with file, line and field path.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlrecipe.errors import UnknownChartError
from mlrecipe.spec import frameworks
from mlrecipe.spec import recipe as recipe_models
from mlrecipe.spec.catalog import CHART_SPECIFIC_BLOCKS, ChartInfo, lookup
from mlrecipe.spec.credential_names import ambiguous_env_issues
from mlrecipe.spec.errors import SpecError, SpecIssue, format_path, parse_path
from mlrecipe.spec.framework_scripts import framework_warnings
from mlrecipe.spec.issues import ValueSources, pydantic_issues, set_values_doc
from mlrecipe.spec.launcher import expand_launcher
from mlrecipe.spec.matrix import MatrixPoint, Variant, expand_matrix, group_heads, wire
from mlrecipe.spec.pipeline import Pipeline, PipelineStep, Sweep
from mlrecipe.spec.recipe import COMMAND_BLOCKS, Recipe
from mlrecipe.spec.step_defaults import config_step_defaults
from mlrecipe.spec.values import deep_merge, parse_sets, set_roots
from mlrecipe.spec.yamlfile import Loc, YamlDoc, load_yaml


@dataclass(frozen=True)
class StepSpec:
    """One validated step: its chart, merged values and recipe model."""

    name: str
    chart: ChartInfo
    values: dict[str, Any]
    recipe: Recipe
    depends_on: tuple[str, ...] = ()
    #: The pipeline step sets ``depends_on`` (``[]`` too: it depends on nothing, it does not run in file order).
    declares_depends_on: bool = False
    #: Objects (and the Helm release) carry the step's name: steps of a pipeline never share a name. A
    #: one-step ``install`` keeps the reference's names (``pytorchjob-<release>``) unless it sets step_name.
    named_by_step: bool = True
    #: What may go wrong although the step is valid (a framework the chart does not ship), for ``validate``.
    warnings: tuple[SpecIssue, ...] = field(default=(), compare=False)
    #: Where each value came from: a problem found later (a chart's template check) names the file and line.
    sources: ValueSources | None = field(default=None, compare=False, repr=False)
    #: The combination of a step expanded from a pipeline step's ``matrix`` (:mod:`mlrecipe.spec.matrix`).
    matrix: MatrixPoint | None = field(default=None, compare=False)
    #: The backend this step names (``None``: the release's), and where it is written (file, line, field).
    backend: str | None = None
    backend_at: tuple[str, int | None, str] | None = field(default=None, compare=False, repr=False)
    #: Where the step names its chart (file, line, field): a backend's refusal of the step is reported there.
    chart_at: tuple[str, int | None, str] = field(default=("<command line>", None, "chart"), compare=False,
                                                  repr=False)

    def issue(self, path: str, message: str) -> SpecIssue:
        """A problem with the value at ``path`` (``image``, ``resources.nnodes``), at the file and line it came
        from; without sources, at the step."""
        if self.sources is None:
            return SpecIssue(f"step {self.name}", None, path, message)
        return SpecIssue(*self.sources.locate(parse_path(path)), message)

    @property
    def block(self) -> recipe_models.CommandBlock:
        return self.recipe.command_block(self.chart.block)

    @property
    def command_line(self) -> list[str]:
        """The command and its args, after launcher expansion (shell fragments)."""
        if self.recipe.launcher is not None:
            command, args = expand_launcher(self.recipe.launcher, self.chart.kind)
            return [*command, *args]
        return [*self.block.command, *self.block.args]

    def chart_values(self) -> dict[str, Any]:
        """The values handed to the chart: launcher expanded into the command block."""
        out = dict(self.values)
        if self.recipe.launcher is not None:
            command, args = expand_launcher(self.recipe.launcher, self.chart.kind)
            block = dict(out.get(self.chart.block) or {})
            block.update(command=command, args=args)
            out[self.chart.block] = block
            out.pop("launcher", None)
        if self.named_by_step:
            out.setdefault("step_name", self.name)
        return out

    @property
    def content_hash(self) -> str:
        """Hash of the chart and resolved values: equal hashes mean the step's inputs are unchanged."""
        payload = json.dumps({"chart": self.chart.name, "values": self.values}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ReleaseSpec:
    """A release: its name, namespace, preferred backend and steps in a valid order."""

    release: str
    namespace: str
    steps: list[StepSpec]
    backend: str | None = None
    source: str = ""
    sweep: Sweep | None = None  #: how the end-of-run table ranks the matrix combinations
    sweep_at: str | None = None  #: "file:line" of ``sweep.rank_by``, for the error when no step reports it
    #: Where the pipeline names its backend (file, line, field), for the error when no backend has that name.
    backend_at: tuple[str, int | None, str] | None = field(default=None, compare=False, repr=False)

    @property
    def source_dir(self) -> str:
        """Directory of the pipeline file (or of the first recipe): ``MLRECIPE_PIPELINE_DIR``."""
        first = self.source.split(",")[0]
        return str(Path(first).resolve().parent) if first else str(Path.cwd())

    def step(self, name: str) -> StepSpec:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def dependencies(self) -> dict[str, frozenset[str]]:
        """Step name -> the steps it waits for: its ``depends_on`` when any step declares one, else the
        previous step (a pipeline without ``depends_on`` runs in file order)."""
        if any(s.declares_depends_on or s.depends_on or s.matrix is not None for s in self.steps):
            return {s.name: frozenset(s.depends_on) for s in self.steps}
        names = [s.name for s in self.steps]
        return {name: frozenset(names[i - 1:i]) for i, name in enumerate(names)}


def _chart_rules(recipe: Recipe, values: dict[str, Any], chart: ChartInfo, sources: ValueSources) -> list[SpecIssue]:
    issues: list[SpecIssue] = []

    def add(loc: Loc, msg: str) -> None:
        file, line, path = sources.locate(loc)
        issues.append(SpecIssue(file, line, path, msg))

    for key in COMMAND_BLOCKS:
        if key != chart.block and values.get(key) is not None:
            add((key,), f"chart {chart.name} reads its command from '{chart.block}', not '{key}'")
    for key in CHART_SPECIFIC_BLOCKS - chart.extra_blocks:
        if values.get(key) is not None:
            add((key,), f"'{key}' is not used by chart {chart.name}")
    block = recipe.command_block(chart.block)
    if recipe.launcher is not None and block.command:
        add((chart.block, "command"), "give either 'launcher' or a command, not both")
    scripted = any(line.strip() for line in [*recipe.pre_script, *recipe.inline_script])
    if chart.needs_command and recipe.launcher is None and not scripted and not any(p.strip() for p in block.command):
        add((chart.block, "command"), "empty command: set a command (or a 'launcher' block, or do the work in "
            "pre_script)")
    return issues


def _template_issues(recipe: Recipe, sources: ValueSources) -> list[SpecIssue]:
    """Env values are evaluated as Helm expressions on every backend: a malformed one is refused here, at its file
    and line, before any backend evaluates it (nothing is evaluated here)."""
    located: list[tuple[Loc, str]] = []
    for key in COMMAND_BLOCKS:
        block = getattr(recipe, key)
        located += [((key, "env", i, "value"), e.value) for i, e in enumerate(block.env if block else [])]
    if recipe.mpirun is not None:
        located += [(("mpirun", "env", i, "value"), e.value) for i, e in enumerate(recipe.mpirun.env)]
    located += [(("env", i, "value"), e.value) for i, e in enumerate(recipe.env)]
    if not any("{{" in value for _, value in located):
        return []
    from mlrecipe.helm.tpl import syntax_errors

    return [SpecIssue(*sources.locate(located[i][0]), problem) for i, problem in syntax_errors([v for _, v in located])]


def build_step(
    name: str,
    chart_name: str,
    values: dict[str, Any],
    sources: ValueSources,
    depends_on: tuple[str, ...] = (),
    chart_loc: tuple[YamlDoc, Loc] | None = None,
) -> tuple[StepSpec | None, list[SpecIssue]]:
    """Validate ``values`` for ``chart_name``; return the step or the issues found."""
    try:
        chart = lookup(chart_name)
    except UnknownChartError as exc:
        if chart_loc is not None:
            doc, loc = chart_loc
            return None, [SpecIssue(doc.file, doc.line_of(loc), format_path(loc), str(exc))]
        return None, [SpecIssue("<command line>", None, "chart", str(exc))]
    if not isinstance(values, dict):
        file, line, path = sources.locate(())
        return None, [SpecIssue(file, line, path, f"must be a mapping of values, got {type(values).__name__}")]
    values = {**config_step_defaults(), **values}  # the config file's watchdog: for the steps that set none
    try:
        recipe = Recipe.model_validate(values)
    except ValidationError as exc:
        return None, pydantic_issues(exc, values, sources)
    issues = (_chart_rules(recipe, values, chart, sources) + _template_issues(recipe, sources)
              + ambiguous_env_issues(values, sources))
    if issues:
        return None, issues
    step = StepSpec(name, chart, values, recipe, depends_on, sources=sources)
    if chart_loc is not None:
        doc, loc = chart_loc
        step = dataclasses.replace(step, chart_at=(doc.file, doc.line_of(loc), format_path(loc)))
    warnings = framework_warnings(chart, recipe.framework, step.command_line, (chart.block, "command"),
                                  [*recipe.pre_script, *recipe.inline_script])
    if warnings:
        step = dataclasses.replace(step, warnings=tuple(SpecIssue(*sources.locate(loc), msg) for loc, msg in warnings))
    return step, []


def _read_recipe_files(paths: list[str], base: Path | None, sources: ValueSources,
                       shown: list[str] | None = None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    issues: list[SpecIssue] = []
    names = shown if shown is not None and len(shown) == len(paths) else [None] * len(paths)
    for raw, name in zip(paths, names, strict=True):
        path = Path(raw) if base is None or Path(raw).is_absolute() else base / raw
        try:
            doc = load_yaml(path, name)
        except SpecError as exc:
            issues.extend(exc.issues)
            continue
        data = doc.data if doc.data is not None else {}
        if not isinstance(data, dict):
            issues.append(SpecIssue(doc.file, 1, "", f"a recipe must be a mapping, got {type(data).__name__}"))
            continue
        sources.entries.append((doc, (), ""))
        merged = deep_merge(merged, data)
    if issues:
        raise SpecError(issues)
    return merged


def load_step_release(
    release: str,
    chart: str,
    recipe_files: list[str],
    sets: list[str] | None = None,
    namespace: str = "default",
    step_name: str | None = None,
    shown_files: list[str] | None = None,
) -> ReleaseSpec:
    """Build a one-step release from ``-f`` recipe files and ``--set`` overrides (``install``/``template``).
    ``shown_files``: the files as the user named them (relative), for messages, when ``recipe_files`` are resolved."""
    import re

    from mlrecipe.spec.names import NAME_PATTERN

    issues: list[SpecIssue] = []
    if not re.match(NAME_PATTERN, release) or len(release) > 40:
        issues.append(SpecIssue("<command line>", None, "RELEASE",
                                f"invalid release name '{release}': lowercase letters, digits and '-', "
                                "at most 40 characters"))
    if not re.match(NAME_PATTERN, namespace) or len(namespace) > 63:  # like a pipeline's namespace: a path part
        issues.append(SpecIssue("<command line>", None, "--namespace",
                                f"invalid namespace '{namespace}': lowercase letters, digits and '-', "
                                "at most 63 characters"))
    sources = ValueSources()
    values: dict[str, Any] = {}
    try:
        values = _read_recipe_files(recipe_files, None, sources, shown_files)
    except SpecError as exc:
        issues.extend(exc.issues)
    try:
        overrides = parse_sets(sets or [])
        values = deep_merge(values, overrides)
        sources.sets = (set_values_doc(overrides), "") if overrides else None
    except SpecError as exc:
        issues.extend(exc.issues)
    if issues:
        raise SpecError(issues)
    try:
        short = lookup(chart).name.split("/")[-1]
    except UnknownChartError:
        short = "step"
    name = step_name or values.get("step_name") or short
    step, step_issues = build_step(name, chart, values, sources)
    if step_issues or step is None:
        raise SpecError(step_issues)
    if not (step_name or values.get("step_name")):
        step = dataclasses.replace(step, named_by_step=False)
    return ReleaseSpec(release, namespace, [step], source=",".join(recipe_files))


def _order_steps(steps: list[StepSpec], doc: YamlDoc) -> tuple[list[StepSpec], list[SpecIssue]]:
    names = [s.name for s in steps]
    issues: list[SpecIssue] = []
    for i, s in enumerate(steps):
        for j, dep in enumerate(s.depends_on):
            if dep not in names:
                loc: Loc = ("steps", i, "depends_on", j)
                issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc), f"unknown step '{dep}'"))
            elif dep == s.name:
                loc = ("steps", i, "depends_on", j)
                issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc), "a step cannot depend on itself"))
    # Kahn's algorithm, stable in file order. Without depends_on, steps run in file order. The edges reported above
    # are left out, so that a cycle elsewhere is reported with them.
    explicit = any(s.declares_depends_on or s.depends_on for s in steps)
    deps = {
        s.name: {d for d in s.depends_on if d in names and d != s.name} if explicit else set(names[max(i - 1, 0):i])
        for i, s in enumerate(steps)
    }
    ordered: list[StepSpec] = []
    done: set[str] = set()
    while len(ordered) < len(steps):
        ready = [s for s in steps if s.name not in done and deps[s.name] <= done]
        if not ready:
            cyc = [s.name for s in steps if s.name not in done]
            i = names.index(cyc[0])
            loc = ("steps", i, "depends_on")
            issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc),
                                    f"dependency cycle among steps: {' -> '.join(cyc)}"))
            return steps, issues
        ordered.append(ready[0])
        done.add(ready[0].name)
    return (steps, issues) if issues else (ordered, issues)


def _unknown_set_steps(sets: list[str], overrides: dict[str, Any], names: list[str]) -> list[SpecIssue]:
    """A pipeline's ``--set`` expressions start with a step name (``train.resources.nnodes=2``): one that names no
    step, or sets a step to a plain value, would be ignored; each is an issue naming the expression and the steps."""
    if not overrides:
        return []
    issues: list[SpecIssue] = []
    steps = ", ".join(names)
    for root, exprs in set_roots(sets).items():
        for expr in exprs:
            if root not in names:
                close = difflib.get_close_matches(root.lower(), names, n=1, cutoff=0.6)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                issues.append(SpecIssue("--set", None, expr, f"no step '{root}' in this pipeline{hint}: a pipeline's "
                                        f"--set starts with a step name ({names[0]}.resources.nnodes=2); steps: "
                                        f"{steps}"))
            elif not isinstance(overrides.get(root), dict):
                issues.append(SpecIssue("--set", None, expr, f"sets step '{root}' to a plain value: give a field of "
                                        f"the step ({root}.resources.nnodes=2)"))
    return issues


def load_pipeline(path: str | Path, sets: list[str] | None = None) -> ReleaseSpec:
    """Load and validate a pipeline file and every recipe it names; all issues at once.

    Phases: read the file into its model, check its shape (step names, matrix, ``--set``), resolve each step's values
    (recipe files, inline values, ``--set``) and build its steps, order them, then run the frameworks' pipeline checks
    on the release."""
    doc, pipeline = _read_pipeline(path)
    variants, issues = _shape_issues(pipeline, doc)
    overrides, set_issues = _pipeline_overrides(sets or [], pipeline)
    issues.extend(set_issues)
    base = Path(path).resolve().parent
    steps: list[StepSpec] = []
    for i, st in enumerate(pipeline.steps):
        steps.extend(_pipeline_step(i, st, variants[i], doc, base, overrides, issues))
    if issues:
        raise SpecError(issues)
    ordered, order_issues = _order_steps(group_heads(steps), doc)  # on the file's steps: their lines
    if order_issues:
        raise SpecError(order_issues)
    spec = _release(pipeline, doc, wire(ordered, steps))
    framework_issues = [issue for check in frameworks.pipeline_checks() for issue in check(spec)]
    if framework_issues:
        raise SpecError(framework_issues)
    return spec


def _read_pipeline(path: str | Path) -> tuple[YamlDoc, Pipeline]:
    """The pipeline file and its model (one issue for a file that is not a mapping; the model's issues at once)."""
    doc = load_yaml(path)
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        raise SpecError.single(doc.file, f"a pipeline must be a mapping, got {type(data).__name__}", 1)
    try:
        return doc, Pipeline.model_validate(data)
    except ValidationError as exc:
        raise SpecError(pydantic_issues(exc, data, ValueSources([(doc, (), "")]))) from None


def _shape_issues(pipeline: Pipeline, doc: YamlDoc) -> tuple[list[list[Variant]], list[SpecIssue]]:
    """Each step's matrix variants, and the issues of the steps' shape: duplicate names, bad matrices."""
    issues: list[SpecIssue] = []
    seen: dict[str, int] = {}
    for i, st in enumerate(pipeline.steps):
        if st.name in seen:
            loc: Loc = ("steps", i, "name")
            issues.append(SpecIssue(doc.file, doc.line_of(loc), format_path(loc),
                                    f"duplicate step name '{st.name}' (also steps[{seen[st.name]}])"))
        seen.setdefault(st.name, i)
    variants, matrix_issues = expand_matrix(pipeline, doc)
    return variants, issues + matrix_issues


def _pipeline_overrides(sets: list[str], pipeline: Pipeline) -> tuple[dict[str, Any], list[SpecIssue]]:
    """The ``--set`` overrides by step name, and the issues of expressions that cannot be read or name no step."""
    issues: list[SpecIssue] = []
    try:
        overrides = parse_sets(sets)
    except SpecError as exc:
        issues.extend(exc.issues)
        overrides = {}
    return overrides, issues + _unknown_set_steps(sets, overrides, [st.name for st in pipeline.steps])


def _recipe_values(i: int, st: PipelineStep, doc: YamlDoc, base: Path, sources: ValueSources) -> dict[str, Any]:
    """The step's recipe: inline, or read from its files (a file that cannot be read: at the line naming it)."""
    loc: Loc = ("steps", i, "recipe")
    if isinstance(st.recipe, dict):
        sources.entries.append((doc, loc, f"steps[{i}].recipe"))
        return dict(st.recipe)
    if isinstance(st.recipe, list) and not st.recipe:
        raise SpecError([SpecIssue(doc.file, doc.line_of(loc), format_path(loc), "an empty list names no "
                                   "recipe: give a file, a list of files, or the recipe itself (a mapping)")])
    if st.recipe is None:  # no recipe: what the values lack is named at the step's line
        sources.entries.append((doc, loc, f"steps[{i}].recipe"))
        return {}
    files = [st.recipe] if isinstance(st.recipe, str) else st.recipe
    try:
        return _read_recipe_files(files, base, sources)
    except SpecError as exc:
        raise SpecError([SpecIssue(doc.file, doc.line_of(loc), format_path(loc), f"{e.file}: {e.message}")
                         if e.line is None and not e.path else e for e in exc.issues]) from None


@dataclass(frozen=True)
class _StepBackend:
    """Where a pipeline step runs: its ``backend:``, or the one ``--set <step>.backend=`` chooses."""

    name: str | None
    from_set: bool
    issues: list[SpecIssue]


def _step_backend(st: PipelineStep, step_sets: Any) -> _StepBackend:
    if not (isinstance(step_sets, dict) and "backend" in step_sets):
        return _StepBackend(st.backend, False, [])
    chosen = step_sets["backend"]  # --set train.backend=local: where the step runs
    issues = []
    if chosen is not None and not isinstance(chosen, str):
        issues.append(SpecIssue("--set", None, f"{st.name}.backend", f"must be a backend name (or null: the "
                                f"release's backend), got {chosen!r}"))
    return _StepBackend(chosen or None, True, issues)


def _pipeline_step(i: int, st: PipelineStep, variants: list[Variant], doc: YamlDoc, base: Path,
                   overrides: dict[str, Any], issues: list[SpecIssue]) -> list[StepSpec]:
    """The steps of pipeline step ``i`` (one per matrix variant) with their values resolved; its issues are added to
    ``issues`` (those of its variants once: a bad matrix key is the same issue in each)."""
    sources = ValueSources()
    try:
        values = _recipe_values(i, st, doc, base, sources)
    except SpecError as exc:
        issues.extend(exc.issues)
        return []
    if st.values:
        sources.entries.append((doc, ("steps", i, "values"), f"steps[{i}].values"))
        values = deep_merge(values, st.values)
    step_sets = overrides.get(st.name)
    backend = _step_backend(st, step_sets)
    if backend.from_set and isinstance(step_sets, dict):
        step_sets = {k: v for k, v in step_sets.items() if k != "backend"}
    if isinstance(step_sets, dict) and step_sets:
        values = deep_merge(values, step_sets)
        sources.sets = (set_values_doc(step_sets), st.name)
    issues.extend(backend.issues)
    steps: list[StepSpec] = []
    for variant in variants:
        step, step_issues = build_step(
            variant.name, st.chart, deep_merge(values, variant.values) if variant.values else values,
            variant.sources(sources), tuple(st.depends_on), (doc, ("steps", i, "chart"))
        )
        issues.extend([issue for issue in step_issues if issue not in issues])
        if step is not None:
            loc: Loc = ("steps", i, "backend")
            where = (doc.file, doc.line_of(loc), format_path(loc)) if st.backend else None
            if backend.from_set:
                where = ("--set", None, f"{st.name}.backend") if backend.name else None
            steps.append(dataclasses.replace(step, matrix=variant.point, backend=backend.name, backend_at=where,
                                             declares_depends_on="depends_on" in st.model_fields_set))
    return steps


def _release(pipeline: Pipeline, doc: YamlDoc, steps: list[StepSpec]) -> ReleaseSpec:
    """The release of the ordered steps, with where the file sets its sweep and backend."""
    sweep_at = None
    if pipeline.sweep is not None:
        line = doc.line_of(("sweep", "rank_by"))
        sweep_at = f"{doc.file}:{line}" if line else doc.file
    backend_at = (doc.file, doc.line_of(("backend",)), "backend") if pipeline.backend else None
    return ReleaseSpec(pipeline.release, pipeline.namespace, steps, pipeline.backend, doc.file,
                       pipeline.sweep, sweep_at, backend_at)


def is_pipeline_file(path: str | Path) -> bool:
    """True when the YAML file at ``path`` is a pipeline (has ``steps``), not a recipe."""
    doc = load_yaml(path)
    return isinstance(doc.data, dict) and "steps" in doc.data
