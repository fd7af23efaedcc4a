"""The one retry rule for submitting a step, for every backend: a :class:`~mlrecipe.errors.TransientBackendError`
(throttling, a 5xx answer, an API server or login node that did not answer) is asked again after a bounded backoff;
any other error, and the last transient one, fails the submission at once.

A backend raises ``TransientBackendError`` from ``submit`` only where asking again is safe: nothing was made, or
its next ``submit`` finds what a lost attempt made and adopts it (SageMaker finds its jobs and endpoints by tags).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from mlrecipe.errors import TransientBackendError

T = TypeVar("T")

#: Seconds before the 2nd and the 3rd try: three tries in all, about four seconds of waiting at most.
SUBMIT_BACKOFF = (1.0, 3.0)


def submit_with_retry(submit: Callable[[], T], *, backoff: tuple[float, ...] | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """``submit()``; after a transient error, ``sleep(delay)`` and again, once per entry of ``backoff``
    (:data:`SUBMIT_BACKOFF` when not given); the error of the last try propagates."""
    for delay in SUBMIT_BACKOFF if backoff is None else backoff:
        try:
            return submit()
        except TransientBackendError:
            sleep(delay)
    return submit()
