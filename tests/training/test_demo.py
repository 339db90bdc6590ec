"""``flashgnn demo``: the ops forward and backward on a generated graph, against scipy."""

from flashgnn.cli import main


def test_demo_checks_every_precision_against_scipy(capsys):
    assert main(["demo", "--nodes", "700", "--features", "9", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        assert f"\n{precision} " in out
    worst = float(out.strip().splitlines()[-1].split()[-1])
    assert 0 < worst < 1e-2
