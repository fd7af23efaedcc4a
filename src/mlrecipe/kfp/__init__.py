"""Kubeflow Pipelines: ``mlrecipe compile kfp`` turns a pipeline file into a KFP v2 pipeline.

:mod:`.tasks` plans one task per step (pure data, no kfp), :mod:`.compiler` writes it with the kfp SDK,
:mod:`.component` is the lightweight Python component every task runs and :mod:`.step` what it does inside the
task: ``mlrecipe install`` of the step. Only :mod:`.compiler` and :mod:`.component` import kfp.
"""
