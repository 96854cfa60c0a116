"""The command line's small courtesies: a mistyped command or workload gets a "did you mean", the
help reads as prose (no sentence broken where the source broke it), and a flag shows no type."""

import pytest

from conftest import assert_user_error, cli

WIDE = {"COLUMNS": "400"}  # wide enough that no help line wraps: a line break left is one in the text


@pytest.mark.parametrize("args, needles", [
    (["run", "trian"], ["unknown workload 'trian'", "(did you mean train, lm_train?)", "run --help"]),
    (["reprot"], ["unknown command 'reprot'", "did you mean report"]),
    (["data", "imgs"], ["unknown command 'imgs'", "(did you mean images?)"]),
])
def test_unknown_command_is_one_line_with_a_suggestion(args, needles):
    assert_user_error(cli(*args), *needles)


def test_unknown_command_with_nothing_close_says_where_the_list_is():
    proc = cli("run", "zzzz")
    assert_user_error(proc, "unknown workload 'zzzz'", "--help` lists them")
    assert "did you mean" not in proc.stderr


def _commands_panel(help_text: str) -> list[str]:
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line and "─" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("╰"))
    return lines[start + 1:end]


def test_top_level_help_lists_each_command_on_one_line():
    proc = cli("--help", env=WIDE)
    assert proc.returncode == 0, proc.stderr
    rows = _commands_panel(proc.stdout)
    names = [row.strip("│ ").split(" ")[0] for row in rows]
    assert "doctor" in names and "run" in names
    assert all(names), rows  # a row without a name continues the one above: a sentence broken
    doctor = next(row for row in rows if row.strip("│ ").startswith("doctor"))
    assert doctor.rstrip("│ ").endswith("why it falls short."), doctor  # its first sentence, the rest in its own help
    assert any(line.strip() == "Deep learning benchmarks for GPU machines." for line in proc.stdout.splitlines())


def test_command_help_keeps_sentences_whole():
    proc = cli("doctor", "--help", env=WIDE)
    assert proc.returncode == 0, proc.stderr
    assert any("falls short. A run is judged against the machine's own history" in line
               for line in proc.stdout.splitlines()), proc.stdout


@pytest.mark.parametrize("args", [[], ["run"], ["run", "train"], ["suite"], ["doctor"], ["data"], ["data", "images"]])
def test_flags_show_no_type(args):
    proc = cli(*args, "--help", env=WIDE)
    assert proc.returncode == 0, proc.stderr
    assert "--help" in proc.stdout
    assert "<bool>" not in proc.stdout, proc.stdout
