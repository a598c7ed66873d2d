"""Training data on disk: token files (tokenfile.py)."""
