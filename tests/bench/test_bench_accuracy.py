"""flashgnn bench accuracy: rows of every run (PyG twin and precisions, each seed) into the
results layout, the summary against statistics of the rows, the document's section, failures
as rows, and the shipped configs it trains by default."""

from __future__ import annotations

import statistics

import pytest

from flashgnn.benchmarking import accuracy, document, table
from flashgnn.benchmarking.accuracy import AccuracyRow
from flashgnn.cli import main
from flashgnn.training import load_config, resolve_config
from tests.helpers import needs_gpu

TINY = """\
name: {name}
dataset: {{name: synthetic, num_nodes: 400, avg_degree: 6, num_classes: 3}}
model: {{name: {model}, hidden_feats: 8}}
train: {{epochs: 3, progress: false}}
"""


def _config(tmp_path, model: str, name: str | None = None):
    name = name or f"{model}-tiny"
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY.format(name=name, model=model))
    return path


def test_every_run_becomes_a_row_and_the_document_tabulates_them(tmp_path, capsys):
    configs = [_config(tmp_path, "gcn"), _config(tmp_path, "agnn")]
    results = tmp_path / "results"
    args = ["--configs", ",".join(map(str, configs)), "--precisions", "fp32,bf16"]
    args += ["--seeds", "2", "--device", "cpu", "--results", str(results)]
    assert main(["bench", "accuracy", *args]) == 0
    path = results / "cpu" / "accuracy.csv"
    rows = table.read_csv(path, AccuracyRow)
    assert [(r.config, r.impl, r.seed) for r in rows] == [
        (c, impl, seed)
        for c in ("gcn-tiny", "agnn-tiny")
        for impl in ("pyg", "fp32", "bf16")
        for seed in (0, 1)
    ]
    assert all(0 <= r.test <= 1 and r.epochs_run == 3 and r.epoch_ms > 0 for r in rows)
    assert table.read_environment(path)["cpu"]  # the stamp says where it ran
    md = document.build(results, tmp_path)
    section = md.split("## Accuracy against PyG and the papers", 1)[1]
    mean = {
        (c, i): statistics.fmean(100 * r.test for r in rows if (r.config, r.impl) == (c, i))
        for c in ("gcn-tiny", "agnn-tiny")
        for i in ("pyg", "fp32", "bf16")
    }
    line = next(x for x in section.splitlines() if x.startswith("| AGNN | synthetic | 2 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert [float(c.split(" +- ")[0]) for c in cells[4:7]] == pytest.approx(
        [round(mean["agnn-tiny", i], 2) for i in ("pyg", "fp32", "bf16")]
    )
    fp32_minus_pyg = mean["agnn-tiny", "fp32"] - mean["agnn-tiny", "pyg"]
    assert float(cells[7]) == pytest.approx(fp32_minus_pyg, abs=0.006)
    assert "| model | data | seeds | paper | pyg | fp32 | bf16 |" in section
    assert "gcn-tiny" not in capsys.readouterr().err


def test_summary_against_the_papers_and_the_spread_of_the_precisions():
    def rows(impl, tests):
        return [AccuracyRow("gat-cora", "gat", "cora", impl, s, t) for s, t in enumerate(tests)]

    data = rows("pyg", [0.82, 0.84]) + rows("fp32", [0.83, 0.83]) + rows("fp16", [0.80, 0.81])
    data += rows("tf32", [0.835, 0.835])
    header, body = accuracy.summary(data)
    assert header == [
        "model",
        "data",
        "seeds",
        "paper",
        "pyg",
        "fp32",
        "tf32",
        "fp16",
        "fp32 - pyg",
        "precisions - fp32",
    ]
    assert body == [
        [
            "GAT",
            "cora",
            "2",
            "83.0",
            f"83.00 +- {100 * statistics.stdev([0.82, 0.84]):.2f}",
            "83.00 +- 0.00",
            "83.50 +- 0.00",
            f"80.50 +- {100 * statistics.stdev([0.80, 0.81]):.2f}",
            "+0.00",
            "2.50",
        ]
    ]


def test_a_config_that_cannot_run_is_a_row_with_its_error(tmp_path, capsys):
    bad = tmp_path / "gcn-bad.yaml"
    bad.write_text(TINY.format(name="gcn-bad", model="gcn").replace("hidden_feats: 8", "heads: 8"))
    out = tmp_path / "rows.csv"
    args = ["--configs", f"{bad},{_config(tmp_path, 'gcn')}", "--precisions", "fp32"]
    assert main(["bench", "accuracy", *args, "--seeds", "1", "--csv", str(out)]) == 1
    rows = table.read_csv(out, AccuracyRow)
    assert rows[0].config == "gcn-bad" and "heads" in rows[0].error
    assert [r.impl for r in rows[1:]] == ["pyg", "fp32"]
    assert "failed: gcn-bad" in capsys.readouterr().err
    assert "Failed: gcn-bad: " in "\n".join(document.accuracy_table(out))
    missing = ["--configs", "no-such-config", "--csv", str(out)]
    assert main(["bench", "accuracy", *missing]) == 2
    assert "no such config" in capsys.readouterr().err


def test_append_keeps_the_other_configs_and_says_where_they_come_from(tmp_path):
    gcn, agnn = _config(tmp_path, "gcn"), _config(tmp_path, "agnn")
    out = tmp_path / "rows.csv"
    common = ["--precisions", "fp32", "--seeds", "1", "--device", "cpu", "--csv", str(out)]
    assert main(["bench", "accuracy", "--configs", f"{gcn},{agnn}", *common]) == 0
    first = table.read_csv(out, AccuracyRow)
    earlier = table.read_environment(out)
    assert main(["bench", "accuracy", "--configs", str(agnn), "--no-reference", *common]) == 0
    assert [r.config for r in table.read_csv(out, AccuracyRow)] == ["agnn-tiny"]  # replaced
    table.write_csv(first, out, earlier, AccuracyRow)
    assert main(["bench", "accuracy", "--configs", str(agnn), "--append", *common]) == 0
    rows = table.read_csv(out, AccuracyRow)
    assert [(r.config, r.impl) for r in rows] == [
        ("gcn-tiny", "pyg"),
        ("gcn-tiny", "fp32"),
        ("agnn-tiny", "pyg"),
        ("agnn-tiny", "fp32"),
    ]
    assert rows[:2] == first[:2]
    note = table.read_environment(out)["note"]
    assert note == (
        f"Rows of gcn-tiny from an earlier run: commit `{earlier['commit'][:7]}`, "
        f"`{earlier['command']}`."
    )
    assert note in document.stamp(table.read_environment(out), out, tmp_path)


def test_several_jobs_give_the_rows_of_one(tmp_path):
    configs = [_config(tmp_path, "gcn"), _config(tmp_path, "gcn", "gcn-other")]
    one = accuracy.measure(configs, ["fp32"], 2, None, ["train.device=cpu"], tmp_path / "a")
    two = accuracy.measure(configs, ["fp32"], 2, None, ["train.device=cpu"], tmp_path / "b", 3)
    assert [(r.config, r.seed) for r in two] == [(c.stem, s) for c in configs for s in (0, 1)]
    assert [(r.config, r.seed, r.test, r.val, r.best_epoch) for r in one] == [
        (r.config, r.seed, r.test, r.val, r.best_epoch) for r in two
    ]


def test_the_default_configs_are_the_papers_recipes():
    for name in accuracy.CONFIGS:
        cfg = resolve_config(load_config(accuracy.config_path(name)))
        model, dataset = cfg["model"]["name"], cfg["dataset"]["name"]
        assert name == f"{model}-{dataset.replace('_', '-')}"
        assert ((model, dataset) in accuracy.PAPER) == (dataset != "musae_facebook")
        assert cfg["dataset"]["normalize_features"] and cfg["self_loops"]


@needs_gpu
def test_the_runs_on_the_gpu_in_two_processes(tmp_path):
    configs = [_config(tmp_path, "gat"), _config(tmp_path, "agnn")]
    out = tmp_path / "rows.csv"
    args = ["--configs", ",".join(map(str, configs)), "--precisions", "fp32,fp16,bf16,tf32"]
    args += ["--seeds", "2", "--device", "cuda", "--jobs", "2", "--csv", str(out)]
    assert main(["bench", "accuracy", *args]) == 0
    rows = table.read_csv(out, AccuracyRow)
    assert len(rows) == 2 * 5 * 2 and not any(r.error for r in rows)
    assert table.read_environment(out)["gpu"]


def test_each_finished_run_is_handed_on_so_a_table_cut_short_keeps_it(tmp_path):
    configs = [_config(tmp_path, "gcn")]
    seen = []
    rows = accuracy.measure(
        configs, ["fp32", "bf16"], 2, "pyg", ["train.device=cpu"], tmp_path, 1, seen.append
    )
    # rows are handed on in the table's order: the twin's runs, then each precision's
    order = [(i, s) for i in ("pyg", "fp32", "bf16") for s in (0, 1)]
    assert [[(r.impl, r.seed) for r in s] for s in seen] == [order[:n] for n in range(1, 7)]
    assert seen[-1] == rows
