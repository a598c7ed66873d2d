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


# A training run small enough for a test: a few seconds on one core.
TINY_TRAIN = ["--preset", "toy-v0", "--embed_dim", "32", "--num_heads", "2", "--num_layers", "2", "--seq_len", "16"]
TINY_TRAIN += ["--batch_size", "4", "--warmup_steps", "2", "--no_progress", "--max_lr", "3e-3"]
