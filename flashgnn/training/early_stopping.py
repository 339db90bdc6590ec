"""When training stops and which epoch's weights a run keeps (``train.early_stopping``).

Three rules, each the one a paper trains with:

- ``score`` (PyG's and DGL's examples): keep the epoch of the best validation score (the
  first of equal ones); stop ``patience`` epochs after it.
- ``score_or_loss`` (GAT, Velickovic et al.): an epoch whose validation score is at least the
  best so far, or whose validation loss is at most the lowest so far, resets the count; the
  run keeps the last epoch that did both; stop after ``patience`` epochs without a reset.
- ``loss_window`` (GCN, Kipf & Welling): keep the last epoch; stop once the validation loss
  exceeds the mean of the ``patience`` losses before it.

Epochs are counted as evaluated (``train.eval_every``); ``patience`` None never stops.
"""

from __future__ import annotations

import statistics

RULES = ("score", "score_or_loss", "loss_window")


class EarlyStopping:
    """``update`` after each evaluation says whether to keep that epoch's weights;
    ``should_stop`` whether to end the run there."""

    def __init__(self, patience: int | None, rule: str = "score"):
        if rule not in RULES:
            raise ValueError(f"early stopping rule must be one of {RULES}, got {rule!r}")
        self.patience = patience
        self.rule = rule
        self.best_score = -float("inf")
        self.best_loss = float("inf")
        self.best_epoch = -1  # the epoch whose weights are kept
        self.reset_epoch = -1  # the last epoch that restarted the count
        self.losses: list[float] = []  # loss_window: the last patience + 2 losses

    @property
    def needs_loss(self) -> bool:
        """Whether ``update`` needs the validation loss."""
        return self.rule != "score"

    def update(self, epoch: int, score: float, loss: float | None = None) -> bool:
        """Record the validation ``score`` (and ``loss``, where ``needs_loss``) of ``epoch``;
        True when the run keeps this epoch's weights."""
        if self.needs_loss and loss is None:
            raise ValueError(f"the early stopping rule {self.rule!r} needs the validation loss")
        if self.rule == "score":
            if score > self.best_score:
                self.best_score, self.best_epoch = score, epoch
                self.reset_epoch = epoch
                return True
            return False
        if self.rule == "loss_window":
            self.losses = [*self.losses, loss][-(self.patience or 0) - 2 :]
            self.best_score, self.best_loss, self.best_epoch = score, loss, epoch
            return True
        better_score, lower_loss = score >= self.best_score, loss <= self.best_loss
        if better_score or lower_loss:
            self.reset_epoch = epoch
            self.best_score = max(score, self.best_score)
            self.best_loss = min(loss, self.best_loss)
            if better_score and lower_loss:
                self.best_epoch = epoch
                return True
        return False

    def should_stop(self, epoch: int) -> bool:
        if self.patience is None:
            return False
        if self.rule == "loss_window":
            # as Kipf & Welling's code: from the (patience + 2)-th evaluation on
            if len(self.losses) < self.patience + 2:
                return False
            return self.losses[-1] > statistics.fmean(self.losses[-self.patience - 1 : -1])
        return epoch - self.reset_epoch >= self.patience

    def state_dict(self) -> dict:
        return {
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "best_loss": self.best_loss,
            "reset_epoch": self.reset_epoch,
            "losses": list(self.losses),
        }

    def load_state_dict(self, state: dict) -> None:
        self.best_score, self.best_epoch = state["best_score"], state["best_epoch"]
        # checkpoints written before the other rules hold the score rule's two entries
        self.best_loss = state.get("best_loss", float("inf"))
        self.reset_epoch = state.get("reset_epoch", self.best_epoch)
        self.losses = list(state.get("losses", []))
