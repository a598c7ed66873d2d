"""`gradcraft generate` at the end of a pipe that closes early (`| head -c 10`), or with stdin or stdout
closed: it ends quietly (status 141, as SIGPIPE ends other tools) or with one `error:` line, never a
traceback. Real processes and real pipes (the behaviour is in how the interpreter exits)."""

import os
import subprocess
import sys

GENERATE = [sys.executable, "-m", "gradcraft.cli.main", "generate"]


def test_reader_closing_the_pipe_ends_generate_quietly(trained_run):
    proc = subprocess.Popen(
        [
            *GENERATE,
            "--model_dir",
            str(trained_run / "run"),
            "--prompt",
            "def",
            "--max_tokens",
            "2000",
            "--temp",
            "1",
            "--seed",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.read(10)  # what `head -c 10` takes, then it goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert len(first) == 10 and err == "", err


def test_through_a_shell_pipe_to_head(trained_run):
    result = subprocess.run(
        f"{' '.join(GENERATE)} --model_dir {trained_run / 'run'} --prompt def --max_tokens 2000 "
        "--temp 1 --seed 2 | head -c 10; exit ${PIPESTATUS[0]}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 141 and result.stderr == b"", result.stderr.decode()
    assert len(result.stdout) == 10


def test_closed_stdin_or_stdout_is_one_error_line(trained_run):
    model = f"--model_dir {trained_run / 'run'}"
    for redirect, words in (("<&-", "stdin is closed"), ("--prompt def >&-", "stdout is closed")):
        result = subprocess.run(
            f"{' '.join(GENERATE)} {model} {redirect}",
            shell=True,
            executable="/bin/bash",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, (redirect, result.stderr)
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and words in result.stderr


def test_piped_prompt_that_is_not_text_is_one_error_line(trained_run):
    result = subprocess.run(
        [*GENERATE, "--model_dir", str(trained_run / "run")],
        input=b"\xff\xfe\xfa not utf-8",
        capture_output=True,
        timeout=120,
        env=dict(os.environ, PYTHONIOENCODING="utf-8"),
    )
    err = result.stderr.decode()
    assert result.returncode == 2 and err.startswith("error: ") and err.count("\n") == 1, err
