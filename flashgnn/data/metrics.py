"""Scores of node-classification predictions: accuracy, micro-F1, and OGB's own evaluator.

Every scorer takes ``(logits, y)`` for the rows to score and returns a float; higher is
better. Single-label: logits [m, C], y int64 [m]. Multi-label: logits [m, C] (a positive
logit predicts the label), y [m, C] of 0/1.
"""

from __future__ import annotations

import torch
from torch import Tensor

METRICS = ("accuracy", "f1_micro", "rocauc")


def accuracy(logits: Tensor, y: Tensor) -> float:
    """Fraction of rows whose arg-max class is the label."""
    if y.numel() == 0:
        raise ValueError("accuracy of an empty set of nodes")
    return (logits.argmax(dim=-1) == y).double().mean().item()


def f1_micro(logits: Tensor, y: Tensor) -> float:
    """Micro-averaged F1 over all (row, label) pairs, a label predicted where its logit > 0."""
    pred = logits > 0
    truth = y.bool()
    tp = (pred & truth).sum().item()
    wrong = (pred ^ truth).sum().item()  # false positives + false negatives
    return 2 * tp / (2 * tp + wrong) if tp + wrong else 1.0


class OGBEvaluator:
    """Scores with ``ogb.nodeproppred.Evaluator(name)``, OGB's official leaderboard metric
    (accuracy for ogbn-arxiv/products, mean ROC-AUC over tasks for ogbn-proteins)."""

    def __init__(self, name: str):
        from ogb.nodeproppred import Evaluator

        self.evaluator = Evaluator(name)
        self.metric = {"acc": "accuracy", "rocauc": "rocauc"}[self.evaluator.eval_metric]

    def __call__(self, logits: Tensor, y: Tensor) -> float:
        if self.metric == "accuracy":
            y_pred, y_true = logits.argmax(dim=-1, keepdim=True), y.reshape(-1, 1)
        else:
            y_pred, y_true = logits, y
        result = self.evaluator.eval(
            {"y_true": y_true.detach().cpu(), "y_pred": y_pred.detach().float().cpu()}
        )
        return float(result[self.evaluator.eval_metric])


def scorer(metric: str):
    """The scorer of a metric name computed without OGB: "accuracy" or "f1_micro"."""
    if metric == "accuracy":
        return accuracy
    if metric == "f1_micro":
        return f1_micro
    raise ValueError(
        f"no built-in scorer for metric {metric!r}; choose 'accuracy' or 'f1_micro' "
        "(ROC-AUC is scored by ogb's Evaluator)"
    )


def check_logits(logits: Tensor, num_classes: int) -> None:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor")
    if logits.dim() != 2 or logits.shape[1] != num_classes:
        raise ValueError(
            f"logits must have shape [num_nodes, {num_classes}], got {tuple(logits.shape)}"
        )
