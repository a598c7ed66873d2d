"""Inference: KV-cache generation and sampling, the text layer, and the HTTP server."""
