"""The client of a fork tree: in the server, or in the kernel for ``%%agent`` and ``relay`` (see ``kernel``)."""
