"""The one retry rule for submitting a step, for every backend: a :class:`~mlrecipe.errors.TransientBackendError`
(throttling, a 5xx answer, an API server or login node that did not answer) is asked again after a bounded backoff;
any other error, and the last transient one, fails the submission at once.

The runner keeps watching the other steps while one waits for its next try: the step goes back to the waiting
steps with a time before which it is not started again (:func:`retry_delay` says how long), nothing sleeps.

A backend raises ``TransientBackendError`` from ``submit`` only where asking again is safe: nothing was made, or
its next ``submit`` finds what a lost attempt made and adopts it (SageMaker finds its jobs and endpoints by tags).
"""

from __future__ import annotations

#: Seconds before the 2nd and the 3rd try: three tries in all, about four seconds of waiting at most.
SUBMIT_BACKOFF = (1.0, 3.0)


def retry_delay(tries: int) -> float | None:
    """Seconds to wait before the next try of a submission whose ``tries`` tries (1 or more) each met a transient
    error; ``None`` once the tries are spent (the last error fails the step)."""
    return SUBMIT_BACKOFF[tries - 1] if 1 <= tries <= len(SUBMIT_BACKOFF) else None
