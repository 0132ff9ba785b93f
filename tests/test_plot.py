from pathlib import Path

import numpy as np
import pytest
import yaml

from glamrl.cli import main
from glamrl.eval import plot
from glamrl.eval.plot import agent_label, group_runs, moving_average, plot_runs
from glamrl.run.dir import RunDir
from glamrl.run.log import LogNotFoundError
from glamrl.run.metrics import label


def _run(root, name: str, seed: int, lr: float, updates: int):
    run_dir = root / name
    run_dir.mkdir()
    config = {"env": {"id": "BabyAI-GoToLocal-v0", "seed": seed}, "ppo": {"lr": lr}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    with RunDir(run_dir).open_log(tensorboard=False) as logger:
        for update in range(1, updates + 1):
            logger.log({"update": update, "frames": 64 * update,
                        "success_rate": min(1.0, 0.05 * update + 0.1 * seed), "return_mean": 0.03 * update})
    return run_dir


@pytest.fixture
def runs(tmp_path):
    return [_run(tmp_path, "a_s1", 1, 1e-4, 20), _run(tmp_path, "b_lr", 1, 1e-3, 15),
            _run(tmp_path, "a_s2", 2, 1e-4, 12)]


def test_runs_differing_only_by_seed_are_grouped(runs):
    a1, b, a2 = runs
    assert group_runs(runs) == [[a1, a2], [b]]


def test_runs_are_grouped_by_the_key_given(runs, tmp_path, monkeypatch):
    a1, b, a2 = runs
    row = {a1: "row", b: "row", a2: "other"}.__getitem__  # e.g. an experiment's row, whatever the configs
    assert group_runs(runs, row) == [[a1, b], [a2]]
    figures = _drawn(monkeypatch)
    plot_runs(runs, tmp_path / "rows.png", metrics=("success_rate",), group_by=row,
              labels={a1: "row", a2: "other"}, baselines={"random": {"success_rate": 0.3}, "bot": {"success_rate": 1.0}})
    (ax,) = figures[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"row (mean of 2)", "other", "random", "bot"}
    assert lines["random"].get_linestyle() != lines["bot"].get_linestyle()  # told apart in the legend


def test_plot_writes_a_png(runs, tmp_path):
    out = plot_runs(runs, tmp_path / "plots" / "curves.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_missing_log_is_a_named_error(runs, tmp_path):
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(LogNotFoundError, match="empty_run"):
        plot_runs([*runs, tmp_path / "empty_run"], tmp_path / "curves.png")


def test_legend_names_the_agent_kind_and_config(tmp_path):
    configs = {
        "glam": {"model": {"name": "smollm2-135m", "lora": True}},
        "npae": {"model": {"name": "smollm2-135m", "pretrained": False, "use_action_heads": True}},
        "drrn": {"agent": {"kind": "drrn"}},
        "sym": {"agent": {"kind": "symbolic"}, "symbolic": {"memory": True}},
    }
    run_dirs = []
    for name, config in configs.items():
        run = _run(tmp_path, name, 1, 1e-4, 3)
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "env": {"id": "BabyAI-GoToObjS4-v0"}}))
        run_dirs.append(run)
    assert [agent_label(r) for r in run_dirs] == [
        "llm smollm2-135m lora on GoToObjS4", "npae smollm2-135m on GoToObjS4", "drrn on GoToObjS4",
        "symbolic memory on GoToObjS4"]
    plot_runs(run_dirs, tmp_path / "compare.png")


def test_moving_average_by_hand():
    assert moving_average(np.array([1.0, 2.0, 3.0, 4.0]), 2) == pytest.approx([1.0, 1.5, 2.5, 3.5])
    assert moving_average(np.array([1.0, 2.0, 6.0]), 5) == pytest.approx([1.0, 1.5, 3.0])  # fewer at the start
    assert moving_average(np.array([1.0, 5.0]), 1) == pytest.approx([1.0, 5.0])
    # weighted: a pooled rate, 1 success of 1 episode then 0 of 3 -> 1/4 over the two rows, not 1/2
    assert moving_average(np.array([1.0, 0.0, 1.0]), 2, np.array([1.0, 3.0, 1.0])) == pytest.approx([1.0, 0.25, 0.25])


def test_row_episodes_counts_what_each_rows_mean_is_over():
    rows = [{"episodes": 2, "success_rate": 0.5, "success_rate_go_to": 0.5, "ended_go_to": 2},
            {"episodes": 2},  # no episode ended: empty cells
            {"episodes": 7, "success_rate": 0.2, "success_rate_go_to": 0.0, "ended_go_to": 1,
             "success_rate_open": 0.25, "ended_open": 4}]
    assert list(plot.row_episodes(rows, "success_rate")) == [2, 0, 5]
    assert list(plot.row_episodes(rows, "num_frames_mean")) == [2, 0, 5]
    assert list(plot.row_episodes(rows, "success_rate_go_to"))[::2] == [2, 1]
    assert plot.row_episodes(rows, "success_rate_open")[2] == 4
    assert plot.row_episodes(rows, "num_frames_max") is None  # not a mean: smoothed as logged
    older = [{k: v for k, v in row.items() if not k.startswith("ended_")} for row in rows]
    assert plot.row_episodes(older, "success_rate_go_to") is None  # a log from before ended_TASK


def test_smoothed_success_is_pooled_over_the_rows_episodes(tmp_path, monkeypatch):
    """A row that ended one episode, a success, then one that ended nine failures: 0.1 over the two, not 0.5."""
    run = _logged_run(tmp_path, [{"update": 1, "frames": 8, "episodes": 1, "success_rate": 1.0},
                                 {"update": 2, "frames": 16, "episodes": 10, "success_rate": 0.0}])
    figures = _drawn(monkeypatch)
    plot_runs([run], tmp_path / "p.png", metrics=("success_rate",), smooth=2)
    (line,) = figures[0].axes[0].get_lines()
    assert list(line.get_ydata()) == pytest.approx([1.0, 0.1])


@pytest.mark.parametrize("frames_per_update, until", [(8, 24), (16, 48)])  # one process; DD-PPO on 2 ranks
def test_curves_shade_the_rows_before_every_env_could_time_out(tmp_path, monkeypatch, frames_per_update, until):
    """2 envs x a 10-step time-out (x 2 ranks): before 20 (40) frames only episodes shorter than 10 steps can have
    ended; the shade ends at the first row at or past it, on the episode curves only."""
    run = _logged_run(tmp_path, [{"update": u, "frames": frames_per_update * u, "episodes": u,
                                  "success_rate": 1.0, "loss": 0.5} for u in range(1, 6)])
    config = {"env": {"id": "BabyAI-GoToObjS4-v0", "num_envs": 2, "max_steps": 10},
              "ppo": {"num_steps": 4, "minibatch_size": 4}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    figures = _drawn(monkeypatch)
    plot_runs([run], tmp_path / "p.png", metrics=("success_rate", "loss"))
    success, loss = figures[0].axes
    (span,) = success.patches
    assert span.get_x() == frames_per_update and span.get_x() + span.get_width() == until
    assert span.get_label() == plot.SHORT_EPISODES_ONLY and not loss.patches
    twin = tmp_path / "twin"  # a second row of the same config: one span for both, one legend entry
    twin.mkdir()
    for name in ("config.yaml", "log.csv"):
        (twin / name).write_bytes((run / name).read_bytes())
    plot_runs([run, twin], tmp_path / "p.png", metrics=("success_rate",), group_by=str)
    (span,) = figures[1].axes[0].patches
    assert figures[1].axes[0].get_legend_handles_labels()[1].count(plot.SHORT_EPISODES_ONLY) == 1
    mixed = {**config, "env": {"id": "BabyAI-MixedTrainLocal-v0", "num_envs": 2}}  # go_to 64 steps, open 128
    (run / "config.yaml").write_text(yaml.safe_dump(mixed))
    rows = [{"frames": 8 * u, "episodes": u, "duration": 60.0 * u} for u in range(1, 40)]
    assert plot.first_time_out(run, rows, "frames") == 256 and plot.first_time_out(run, rows, "minutes") == 32
    bc = [{"update": u, "steps": 20 * u, "frames": 320 * u, "loss": 0.5} for u in range(1, 4)]
    assert plot.first_time_out(run, bc, "frames") is None  # a BC run logs no episodes: nothing to shade


def _drawn(monkeypatch) -> list:
    """The figures `plot_runs` draws, kept instead of closed."""
    figures = []
    monkeypatch.setattr(plot, "save_figure", lambda fig, out: figures.append(fig) or Path(out))
    return figures


def _logged_run(tmp_path, rows) -> Path:
    """A run directory whose log.csv holds `rows`."""
    run = tmp_path / "run"
    run.mkdir()
    with RunDir(run).open_log(tensorboard=False) as logger:
        for row in rows:
            logger.log(row)
    return run


def test_plot_command_draws_the_chosen_metrics_smoothed_and_labelled(tmp_path, monkeypatch):
    run = _logged_run(tmp_path, [{"update": u, "frames": 8 * u, "num_frames_mean": 2.0 * u, "my_probe": 1.0}
                                 for u in range(1, 5)])
    figures = _drawn(monkeypatch)
    assert main(["plot", str(run), "--metrics", "num_frames_mean,my_probe", "--smooth", "2",
                 "--out", str(tmp_path / "p.png")]) == 0
    (length, probe) = figures[0].axes
    assert [length.get_title(), probe.get_title()] == [label("num_frames_mean"), "my_probe"]
    assert length.get_title() == "mean episode length (frames)" and "moving average of 2" in length.get_ylabel()
    (line,) = length.get_lines()
    assert list(line.get_xdata()) == [8, 16, 24, 32] and list(line.get_ydata()) == pytest.approx([2, 3, 5, 7])


def test_plot_command_draws_against_minutes_of_training(tmp_path, monkeypatch):
    run = _logged_run(tmp_path, [{"update": u, "frames": 8 * u, "duration": 30.0 * u, "success_rate": 0.5}
                                 for u in range(1, 4)])
    figures = _drawn(monkeypatch)
    assert main(["plot", str(run), "--metrics", "success_rate", "--x", "minutes",
                 "--out", str(tmp_path / "p.png")]) == 0
    (ax,) = figures[0].axes
    assert ax.get_xlabel() == "wall-clock minutes" and list(ax.get_lines()[0].get_xdata()) == [0.5, 1.0, 1.5]


def test_plot_command_refuses_an_unknown_metric_in_one_line_listing_the_columns(runs, tmp_path, capsys):
    assert main(["plot", str(runs[0]), "--metrics", "success_rate,sucess_rate", "--out", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("glamrl: error: no metric 'sucess_rate' in the runs' logs; available: update, frames, "
                   "return_mean, success_rate")
    assert not (tmp_path / "p.png").exists()


def test_plot_command_refuses_metrics_with_probes(runs, capsys):
    assert main(["plot", str(runs[0]), "--probes", "--smooth", "3"]) == 2
    assert "--smooth cannot apply with --probes" in capsys.readouterr().err
    assert main(["plot", str(runs[0]), "--probes", "--x", "minutes"]) == 2
    assert "--x cannot apply with --probes" in capsys.readouterr().err


def test_a_metric_glamrl_logs_elsewhere_is_drawn_empty_not_refused(runs, tmp_path):
    assert plot_runs(runs, tmp_path / "q.png", metrics=("q_mean",)).exists()  # DRRN's, absent from these PPO logs


def test_many_panels_wrap_into_rows_with_the_legend_off_the_curves(tmp_path, monkeypatch):
    """Five task kinds: two rows of three on one x range, the sixth axis hidden and holding every legend entry
    (each panel's baselines included); two metrics: one row, the legend right of the last panel."""
    tasks = ("go_to", "pick_up", "open", "put_next", "pick_up_seq_go_to")
    run = _logged_run(tmp_path, [{"update": u, "frames": 8 * u, **{f"success_rate_{t}": 0.5 for t in tasks}}
                                 for u in range(1, 4)])
    figures = _drawn(monkeypatch)
    metrics = [f"success_rate_{t}" for t in tasks]
    plot_runs([run], tmp_path / "p.png", metrics=metrics, baselines={"random": {"success_rate_open": 0.1}})
    axes = figures[0].axes
    assert len(axes) == 6 and [ax.get_subplotspec().rowspan.start for ax in axes] == [0, 0, 0, 1, 1, 1]
    assert [ax.get_title() for ax in axes[:5]] == ["success rate: go to", "success rate: pick up", "success rate: open",
                                                   "success rate: put next", "success rate: pick up, then go to"]
    assert not axes[5].axison and all(ax.get_legend() is None for ax in axes[:5])
    assert [t.get_text() for t in axes[5].get_legend().get_texts()] == [agent_label(run) + ": run", "random"]
    assert axes[4].get_xlim() == axes[0].get_xlim() and axes[0].get_xticklabels()[0].get_visible()
    plot_runs([run], tmp_path / "p.png", metrics=metrics[:2])
    first, last = figures[1].axes
    assert first.get_legend() is None and last.get_legend() is not None


def test_every_group_of_many_has_its_own_colour_and_line_style_in_every_panel(tmp_path, monkeypatch):
    runs = [_run(tmp_path, f"row{i}", 1, 1e-4 * (i + 1), 3) for i in range(16)]  # 16 rows, past the 10 colours
    figures = _drawn(monkeypatch)
    plot_runs(runs, tmp_path / "rows.png", metrics=("success_rate", "return_mean"),
              baselines={"random": {"success_rate": 0.3}})
    styles = []
    for ax in figures[0].axes[:2]:
        curves = [line for line in ax.get_lines() if line.get_label() != "random"]
        styles.append([(line.get_color(), line.get_linestyle()) for line in curves])
    assert len(styles[0]) == 16 and len(set(styles[0])) == 16  # no two groups drawn alike
    assert styles[0] == styles[1]  # a group keeps its look from panel to panel
    (random,) = [line for line in figures[0].axes[0].get_lines() if line.get_label() == "random"]
    assert random.get_color() not in {color for color, _ in styles[0]}  # a baseline is not mistaken for a row


def test_small_multiples_give_each_row_a_panel_over_the_others_in_grey(runs, tmp_path, monkeypatch):
    """Two groups (a_s1 with a_s2, and b_lr): two panels titled by their rows, each drawing its own group in its
    colour and the other in grey, on one x and y range; the legend, right of the last, names the grey rows and the
    baseline."""
    a1, b, a2 = runs
    figures = _drawn(monkeypatch)
    plot.plot_rows(runs, tmp_path / "rows.png", labels={a1: "base", b: "lr 1e-3"},
                   baselines={"random": {"success_rate": 0.3}, "bot": {"num_frames_mean": 5.0}})
    first, second = figures[0].axes
    assert (first.get_title(), second.get_title()) == ("base (mean of 2)", "lr 1e-3")
    for ax, own, other in ((first, "C0", "0.85"), (second, "C1", "0.85")):
        drawn = [line for line in ax.get_lines() if len(line.get_xdata())]
        colours = [line.get_color() for line in drawn]
        assert colours == [other, own, "black"]  # the other row first, behind; the row; one baseline (bot has none)
    base_mean = np.mean([[min(1.0, 0.05 * u + 0.1 * s) for u in range(1, 13)] for s in (1, 2)], axis=0)
    (base,) = [line for line in first.get_lines() if line.get_color() == "C0"]
    assert np.interp(64 * 6, base.get_xdata(), base.get_ydata()) == pytest.approx(base_mean[5], abs=1e-9)
    assert (len(first.collections), len(second.collections)) == (1, 0)  # a band for the row's own seeds only
    assert first.get_ylim() == second.get_ylim() and first.get_xlim() == second.get_xlim()
    assert first.get_legend() is None
    assert [t.get_text() for t in second.get_legend().get_texts()] == ["the other rows", "random"]
    clone = _logged_run(tmp_path, [{"update": u, "frames": 64 * u, "loss": 1.0} for u in (1, 2)])  # no episodes
    plot.plot_rows([*runs, clone], tmp_path / "rows.png", labels={a1: "base", b: "lr 1e-3", clone: "clone"})
    assert [ax.get_title() for ax in figures[1].axes] == ["base (mean of 2)", "lr 1e-3"]  # no panel for the clone


def test_plot_command_draws_rows_apart_for_one_metric(runs, tmp_path, monkeypatch, capsys):
    figures = _drawn(monkeypatch)
    assert main(["plot", *map(str, runs), "--rows", "--metrics", "return_mean", "--out", str(tmp_path / "r.png")]) == 0
    titles = [ax.get_title() for ax in figures[0].axes]
    assert len(titles) == 2 and titles[0].endswith("a_s1, a_s2 (mean of 2)") and titles[1].endswith("b_lr")
    assert all(ax.get_ylabel() == "return_mean" for ax in figures[0].axes)
    assert main(["plot", *map(str, runs), "--rows", "--metrics", "return_mean,success_rate"]) == 2
    assert capsys.readouterr().err.strip() == ("glamrl: error: --rows draws one metric, got --metrics "
                                               "return_mean,success_rate")
    assert main(["plot", str(runs[0]), "--probes", "--rows"]) == 2
    assert "--rows cannot apply with --probes" in capsys.readouterr().err
