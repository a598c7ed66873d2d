"""Running `gradcraft <command>` in-process in a test: its exit status (argparse's own exits included)
and what it printed."""

from gradcraft.cli.main import main


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of main(argv); argv items may be paths or numbers."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err
