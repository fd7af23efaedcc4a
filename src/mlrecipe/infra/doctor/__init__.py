"""``mlrecipe doctor``: preflight checks of what a backend needs, each with the fix for what is missing.

One module per backend (:mod:`.local`, :mod:`.slurm`, :mod:`.kubernetes`) builds a list of
:class:`~.base.Check`; :mod:`.runner` runs them and prints a table (or JSON).
"""

from mlrecipe.infra.doctor.base import Check, CheckResult, Outcome, exit_code, run_checks

__all__ = ["Check", "CheckResult", "Outcome", "exit_code", "run_checks"]
