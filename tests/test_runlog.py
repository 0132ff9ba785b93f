import math

import pytest

from glamrl.run.log import CSV_COLUMNS, LogNotFoundError, RunLogger, episode_stats, read_log, tb_tag


def _metrics(update: int) -> dict:
    return {"update": update, "frames": 100 * update, "FPS": 50.0, "policy_loss": 0.1 * update,
            "approx_kl": 0.01, "success_rate": None, "unknown_key": 7}


def test_rows_are_appended_and_read_back(tmp_path):
    with RunLogger(tmp_path, tensorboard=False) as logger:
        for update in (1, 2, 3):
            logger.log(_metrics(update))
    rows = read_log(tmp_path)
    assert [r["update"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[2]["policy_loss"] == pytest.approx(0.3) and rows[2]["frames"] == 300.0
    assert math.isnan(rows[0]["success_rate"]) and math.isnan(rows[0]["grad_norm"])
    assert list(rows[0]) == list(CSV_COLUMNS)  # unknown keys are not CSV columns


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
    with RunLogger(tmp_path, tensorboard=False) as logger:
        for update in range(1, 6):
            logger.log(_metrics(update))
    with RunLogger(tmp_path, resume_after_update=3, tensorboard=False) as logger:
        logger.log(_metrics(4))
    assert [r["update"] for r in read_log(tmp_path)] == [1.0, 2.0, 3.0, 4.0]


def test_resume_drops_a_half_written_row(tmp_path):
    with RunLogger(tmp_path, tensorboard=False) as logger:
        logger.log(_metrics(1))
    with open(tmp_path / "log.csv", "a") as f:
        f.write("2,,200")  # killed mid-row
    with RunLogger(tmp_path, resume_after_update=1, tensorboard=False) as logger:
        logger.log(_metrics(2))
    assert [r["frames"] for r in read_log(tmp_path)] == [100.0, 200.0]


def test_no_resume_starts_a_fresh_log(tmp_path):
    with RunLogger(tmp_path, tensorboard=False) as logger:
        logger.log(_metrics(1))
    RunLogger(tmp_path, tensorboard=False).close()
    assert read_log(tmp_path) == []


def test_tensorboard_event_file_is_written(tmp_path):
    with RunLogger(tmp_path) as logger:
        logger.log(_metrics(1))
    assert any((tmp_path / "tb").iterdir())


def test_tensorboard_tags_follow_cleanrl():
    assert tb_tag("return_mean") == "charts/episodic_return"
    assert tb_tag("success_rate") == "charts/success_rate"
    assert tb_tag("approx_kl") == "losses/approx_kl"
    assert tb_tag("charts/learning_rate") == "charts/learning_rate"


def test_log_needs_update_and_frames(tmp_path):
    with RunLogger(tmp_path, tensorboard=False) as logger, pytest.raises(KeyError, match="frames"):
        logger.log({"update": 1})


def test_read_log_of_a_run_without_log_names_the_directory(tmp_path):
    with pytest.raises(LogNotFoundError, match=str(tmp_path)):
        read_log(tmp_path)


def test_episode_stats_by_hand():
    stats = episode_stats([1.0, 0.0, 0.5], [4, 10, 7], [True, False, True])
    assert stats == pytest.approx({
        "success_rate": 2 / 3,
        "return_mean": 0.5, "return_std": math.sqrt(1 / 6), "return_min": 0.0, "return_max": 1.0,
        "num_frames_mean": 7.0, "num_frames_std": math.sqrt(6), "num_frames_min": 4.0, "num_frames_max": 10.0,
    })


def test_episode_stats_without_finished_episodes_has_no_nan():
    assert episode_stats([], [], []) == {}
