"""Runs inside the user's kernel: the fork server, and inspection code shipped as source (see ``kernel``)."""
