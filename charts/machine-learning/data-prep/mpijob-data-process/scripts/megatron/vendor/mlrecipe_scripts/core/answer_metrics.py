"""Local answer metrics of the evaluators (``test_checkpoint.py``), used when BERTScore cannot run.

Standard library only. One file for every framework tree: the accelerate tree has it here
(``shared/answer_metrics.py``); ray_train (``shared/``), pytorch_lightning and nemo2 (top level) link to it.
"""

from __future__ import annotations

import re
import string

_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")


def words(text: str) -> list[str]:
    """Lower-cased words, punctuation removed."""
    return _PUNCTUATION.sub(" ", text.lower()).split()


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style token-overlap F1 (1.0 when both are empty, 0.0 when one is)."""
    pred, ref = words(prediction), words(reference)
    if not pred or not ref:
        return float(pred == ref)
    remaining: dict[str, int] = {}
    for word in ref:
        remaining[word] = remaining.get(word, 0) + 1
    common = 0
    for word in pred:
        if remaining.get(word, 0) > 0:
            remaining[word] -= 1
            common += 1
    if not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1: longest common subsequence of the words."""
    pred, ref = words(prediction), words(reference)
    if not pred or not ref:
        return float(pred == ref)
    row = [0] * (len(ref) + 1)
    for p in pred:
        diagonal = 0
        for j, r in enumerate(ref, 1):
            above = row[j]
            row[j] = diagonal + 1 if p == r else max(row[j], row[j - 1])
            diagonal = above
    lcs = row[-1]
    if not lcs:
        return 0.0
    precision, recall = lcs / len(pred), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)
