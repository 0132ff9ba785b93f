import math

import pytest

from glamrl.envs.factory import EpisodeResult
from glamrl.run.dir import RunDir
from glamrl.run.log import LogNotFoundError, episode_stats
from glamrl.run.metrics import LOG_METRICS, column_order, label, tag


def _metrics(update: int) -> dict:
    return {"update": update, "frames": 100 * update, "FPS": 50.0, "policy_loss": 0.1 * update,
            "approx_kl": 0.01, "success_rate": None, "unknown_key": 7}


def test_rows_are_appended_and_read_back(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger:
        for update in (1, 2, 3):
            logger.log(_metrics(update))
    rows = RunDir(tmp_path).read_log()
    assert [r["update"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[2]["policy_loss"] == pytest.approx(0.3) and rows[2]["frames"] == 300.0
    assert math.isnan(rows[0]["success_rate"]) and rows[0]["unknown_key"] == 7  # an unlisted key is a column
    assert list(rows[0]) == ["update", "frames", "FPS", "success_rate", "policy_loss", "approx_kl", "unknown_key"]


def test_a_new_key_becomes_a_column_and_earlier_rows_leave_it_empty(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger:
        logger.log(_metrics(1))
        logger.log({**_metrics(2), "q_mean": 0.5, "epsilon": 0.1, "my_probe": 3.0})  # DRRN's columns, one unlisted
        logger.log(_metrics(3))
    rows = RunDir(tmp_path).read_log()
    assert list(rows[0]) == column_order([*_metrics(1), "q_mean", "epsilon", "my_probe"])
    assert list(rows[0])[-2:] == ["unknown_key", "my_probe"]  # listed columns in the table's order, then the rest
    assert math.isnan(rows[0]["q_mean"]) and rows[1]["q_mean"] == 0.5 and rows[1]["my_probe"] == 3.0
    assert math.isnan(rows[2]["epsilon"]) and [r["update"] for r in rows] == [1, 2, 3]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the rewrite left no temporary


@pytest.mark.parametrize("after, q_means", [(1, [0.2, 0.3, 0.4]), (2, [0.5, 0.3, 0.4])])
def test_resume_after_a_new_column_appeared(tmp_path, after, q_means):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger:
        logger.log(_metrics(1))
        logger.log({**_metrics(2), "q_mean": 0.5})
        logger.log({**_metrics(3), "q_mean": 0.7})
    with RunDir(tmp_path).open_log(resume_after_rows=after, tensorboard=False) as logger:  # before or after it
        for update in range(after + 1, 5):
            logger.log({**_metrics(update), "q_mean": update / 10, "value_std": 2.0})
    rows = RunDir(tmp_path).read_log()
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    assert [r["q_mean"] for r in rows[1:]] == pytest.approx(q_means)  # the column added at update 2 kept or redone
    assert all(math.isnan(r["value_std"]) for r in rows[:after]) and rows[-1]["value_std"] == 2.0


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger:
        for update in range(1, 6):
            logger.log(_metrics(update))
    with RunDir(tmp_path).open_log(resume_after_rows=3, tensorboard=False) as logger:
        logger.log(_metrics(4))
    assert [r["update"] for r in RunDir(tmp_path).read_log()] == [1.0, 2.0, 3.0, 4.0]


def test_resume_drops_a_half_written_row(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger:
        logger.log(_metrics(1))
    with open(tmp_path / "log.csv", "a") as f:
        f.write("2,,200")  # killed mid-row
    with RunDir(tmp_path).open_log(resume_after_rows=1, tensorboard=False) as logger:
        logger.log(_metrics(2))
    assert [r["frames"] for r in RunDir(tmp_path).read_log()] == [100.0, 200.0]


def test_no_resume_starts_a_fresh_log(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger:
        logger.log(_metrics(1))
    RunDir(tmp_path).open_log(tensorboard=False).close()
    assert RunDir(tmp_path).read_log() == []


def test_tensorboard_event_file_is_written(tmp_path):
    with RunDir(tmp_path).open_log() as logger:
        logger.log(_metrics(1))
    assert any((tmp_path / "tb").iterdir())


def test_tensorboard_tags_are_the_log_names_in_cleanrl_groups():
    assert tag("return_mean") == "charts/return_mean"
    assert tag("success_rate") == "charts/success_rate"
    assert tag("approx_kl") == "losses/approx_kl" and tag("q_mean") == "losses/q_mean"
    assert tag("unknown_key") == "charts/unknown_key" and tag("charts/learning_rate") == "charts/learning_rate"
    assert label("num_frames_mean") == "mean episode length (frames)" and label("unknown_key") == "unknown_key"


def test_tensorboard_holds_every_logged_key_under_its_tag(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunDir(tmp_path).open_log() as logger:
        for update in (1, 2):
            logger.log({**_metrics(update), "my_probe": 1.5})
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {tag(k) for k, v in _metrics(1).items() if v is not None} | {
        "charts/my_probe"}
    assert [(e.step, e.value) for e in events.Scalars("losses/policy_loss")] == [(100, pytest.approx(0.1)),
                                                                                 (200, pytest.approx(0.2))]


def test_every_listed_metric_has_a_label_and_help():
    assert all(m.label and m.help and m.name == name for name, m in LOG_METRICS.items())


def test_a_value_that_is_not_a_number_is_refused(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger, pytest.raises(TypeError, match="'note'"):
        logger.log({"update": 1, "frames": 8, "note": "hello"})


def test_log_needs_update_and_frames(tmp_path):
    with RunDir(tmp_path).open_log(tensorboard=False) as logger, pytest.raises(KeyError, match="frames"):
        logger.log({"update": 1})


def test_read_log_of_a_run_without_log_names_the_directory(tmp_path):
    with pytest.raises(LogNotFoundError, match=str(tmp_path)):
        RunDir(tmp_path).read_log()


def _episodes(returns, lengths, successes, tasks=None):
    tasks = tasks or ["GoToLocal"] * len(returns)
    return [EpisodeResult(i, s, r, n, t) for i, (r, n, s, t) in enumerate(zip(returns, lengths, successes, tasks))]


def test_episode_stats_by_hand():
    stats = episode_stats(_episodes([1.0, 0.0, 0.5], [4, 10, 7], [True, False, True]))
    assert stats == pytest.approx({
        "success_rate": 2 / 3,
        "return_mean": 0.5, "return_std": math.sqrt(1 / 6), "return_min": 0.0, "return_max": 1.0,
        "num_frames_mean": 7.0, "num_frames_std": math.sqrt(6), "num_frames_min": 4.0, "num_frames_max": 10.0,
    })


def test_episode_stats_per_task_kind_by_hand():
    finished = _episodes([1.0, 0.0, 0.5, 0.0], [4, 10, 7, 9], [True, False, True, False],
                         ["go_to", "open", "go_to", "go_to"])
    stats = episode_stats(finished, per_task=True)
    assert stats["success_rate_go_to"] == pytest.approx(2 / 3) and stats["success_rate_open"] == 0.0
    assert stats["ended_go_to"] == 3 and stats["ended_open"] == 1  # what each rate rests on
    assert "success_rate_pick_up" not in stats and "ended_pick_up" not in stats  # none ended: empty cells, not 0
    assert not [k for k in episode_stats(finished) if k.startswith(("success_rate_", "ended_"))]


def test_episode_stats_without_finished_episodes_has_no_nan():
    assert episode_stats([]) == {}
    assert episode_stats([], per_task=True) == {}
