"""Command-line front ends: one module per `gradcraft` subcommand."""
