"""The `tablegen` command line: exit codes and messages."""

import pytest

from tablegen_cli.main import main

IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def test_cli_exit_codes(tmp_path, capsys):
    assert main(["prepare", "--format", "jsonl", "--input", str(tmp_path / "missing.jsonl"),
                 "--output", str(tmp_path / "o")] + IN_PROCESS) == 2
    assert "input not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{}\n")
    assert main(["prepare", "--format", "jsonl", "--input", str(bad), "--output", str(tmp_path / "o2")] + IN_PROCESS) == 2
    assert "no valid records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prepare", "--format", "nope", "--input", str(bad), "--output", str(tmp_path / "o3")])
