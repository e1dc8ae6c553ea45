"""The user's kernel and its copies, by the process each module runs in.

- ``host``: runs where a turn is driven (the Jupyter server, a benchmark,
  the ``%%agent`` host): handles on a kernel (``handle``), kernel clients
  (``client``), private kernels (``launch``), the confinement policy (``policy``)
  and the copy trees driven from outside the kernel (``channel`` over comm
  messages, ``replay`` without fork).
- ``forktree``: the client of a fork tree, in whichever process drives it: the
  server for a local kernel, the kernel itself for ``%%agent`` and, through
  ``relay``, for a kernel behind a gateway (``snapshot``, ``snapshot_node``,
  ``copy_process``; ``bootstrap`` ships the kernel-side modules into a kernel).
- ``inkernel``: what runs inside the user's kernel: ``fork_server`` (the root
  copy is forked here), and the inspection code shipped into the kernel or its
  copies as source, with the parser of its answer (``schema``, ``survey``,
  ``probes``).
- ``copy``: what runs inside a copy: the confinement in one place (``confine``:
  Landlock, rlimits; ``harden``: inherited descriptors, mappings, secrets,
  capabilities; ``procs``: cgroup, subreaper; ``syscall_filter``: seccomp;
  ``libc``), and the copy's life (``after_fork``, ``copy_server``, ``cell_exec``,
  ``capture``, ``reaper``; ``namespace_diff``: what a cell changed, in its answer).
- Shared by all three processes, at this level: ``results`` and ``answer_form``
  (what a copy sends back), ``protocol`` (the frames), ``tree`` (the interface of
  every copy tree), ``rpc`` (one expression in a kernel), ``plots``.

Layers (``lint-imports``): ``host`` > ``forktree`` > ``inkernel`` >
``copy``; the shared modules import none of them. Everything the kernel and
its copies run is injected as ``_jda_kernel``, a mirror of this package
(``forktree.bootstrap``): standard library only.
"""
