"""Runs inside a kernel copy: its confinement, in one place, and its life (see ``kernel``)."""
