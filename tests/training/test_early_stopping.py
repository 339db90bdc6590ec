"""training.early_stopping: each rule against the papers' own loops written out here (the GCN
and GAT reference codes' stopping conditions), on fixed sequences of validation scores and
losses; the rule's state survives a checkpoint; bad rules are refused."""

from __future__ import annotations

import numpy as np
import pytest

from flashgnn.training.early_stopping import RULES, EarlyStopping


def run(stopper: EarlyStopping, scores, losses) -> tuple[int, int]:
    """(epochs run, kept epoch) of the rule over the sequences, one evaluation an epoch."""
    kept = -1
    for epoch, (score, loss) in enumerate(zip(scores, losses)):
        if stopper.update(epoch, score, loss):
            kept = epoch
        if stopper.should_stop(epoch):
            return epoch + 1, kept
    return len(scores), kept


def kipf(losses, window: int) -> int:
    """Epochs run by Kipf & Welling's loop: after epoch e (0-based) it stops when e > window
    and the loss exceeds the mean of the window losses before it."""
    for epoch in range(len(losses)):
        if epoch > window and losses[epoch] > np.mean(losses[epoch - window : epoch]):
            return epoch + 1
    return len(losses)


def velickovic(scores, losses, patience: int) -> tuple[int, int]:
    """(epochs run, kept epoch) of GAT's reference loop."""
    best_acc, best_loss, waited, kept = 0.0, np.inf, 0, -1
    for epoch, (acc, loss) in enumerate(zip(scores, losses)):
        if acc >= best_acc or loss <= best_loss:
            if acc >= best_acc and loss <= best_loss:
                kept = epoch
            best_acc, best_loss, waited = max(acc, best_acc), min(loss, best_loss), 0
        else:
            waited += 1
            if waited == patience:
                return epoch + 1, kept
    return len(scores), kept


def noisy_curves(seed: int, n: int = 300):
    """Validation accuracy rising then flat, loss falling then rising, both noisy and
    quantised as real ones are (ties happen)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    scores = np.round(0.8 * (1 - np.exp(-t / 20)) + rng.normal(0, 0.01, n), 3)
    losses = np.round(1.5 * np.exp(-t / 30) + 0.002 * t + rng.normal(0, 0.01, n), 3)
    return scores.tolist(), losses.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_loss_window_stops_where_the_gcn_reference_loop_stops(seed):
    scores, losses = noisy_curves(seed)
    epochs, kept = run(EarlyStopping(10, "loss_window"), scores, losses)
    assert epochs == kipf(losses, 10) < len(losses)
    assert kept == epochs - 1  # the last epoch is tested


@pytest.mark.parametrize("seed", range(5))
def test_score_or_loss_stops_and_keeps_as_the_gat_reference_loop(seed):
    scores, losses = noisy_curves(seed)
    assert run(EarlyStopping(20, "score_or_loss"), scores, losses) == velickovic(scores, losses, 20)


def test_score_keeps_the_first_best_epoch_and_stops_patience_after_it():
    scores = [0.1, 0.5, 0.4, 0.5, 0.3, 0.2, 0.6]
    assert run(EarlyStopping(3), scores, [None] * 7) == (5, 1)
    assert run(EarlyStopping(None), scores, [None] * 7) == (7, 6)


@pytest.mark.parametrize("rule", RULES)
def test_the_state_resumes_the_same_run(rule):
    scores, losses = noisy_curves(7)
    straight = run(EarlyStopping(15, rule), scores, losses)
    first = EarlyStopping(15, rule)
    for epoch in range(40):
        first.update(epoch, scores[epoch], losses[epoch])
    second = EarlyStopping(15, rule)
    second.load_state_dict(first.state_dict())
    kept = first.best_epoch
    for epoch in range(40, len(scores)):
        if second.update(epoch, scores[epoch], losses[epoch]):
            kept = epoch
        if second.should_stop(epoch):
            assert (epoch + 1, kept) == straight
            return
    assert (len(scores), kept) == straight


def test_a_checkpoint_of_the_score_rule_before_the_other_rules_loads():
    stopper = EarlyStopping(5)
    stopper.load_state_dict({"best_score": 0.7, "best_epoch": 3})
    assert not stopper.should_stop(7) and stopper.should_stop(8)


def test_bad_rule_and_missing_loss_are_refused():
    with pytest.raises(ValueError, match="early stopping rule must be one of"):
        EarlyStopping(10, "val_loss")
    with pytest.raises(ValueError, match="needs the validation loss"):
        EarlyStopping(10, "loss_window").update(0, 0.5)
