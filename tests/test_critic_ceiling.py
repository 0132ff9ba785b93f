import pytest

from benchmarks.critic_ceiling import main


@pytest.mark.parametrize("args, message", [
    (["{tmp}/no_such_run"], "no_such_run is not a directory"),
    (["{tmp}", "--steps", "0"], "--steps 0"),
    (["{tmp}"], "is not a glamrl run directory"),   # a directory with no config.yaml
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("critic_ceiling: error: ") and message in err
