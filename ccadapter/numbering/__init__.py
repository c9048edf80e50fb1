"""From Slurm's numbering of a job's resources to the one cc-backend's metrics use.

Slurm names a job's CPUs by abstract ids (``scontrol show job -d``'s ``CPU_IDs``: socket by
socket, core by core, thread by thread, as doc/html/cpu_management.shtml defines them: "not
Linux/hardware CPU ids") and its GPUs by GRES index. cc-backend names them as its metric
collectors tag their samples: hwthreads by OS processor id, accelerators by the ids of the
subcluster's topology (PCI addresses on real sites). A job held with Slurm's numbers is shown
with other cores' graphs wherever the two differ (SMT nodes, interleaved sockets) and never
with its GPUs' metrics.

:mod:`.topology` reads cc-backend's cluster configuration (``GET /api/clusters/`` or a
``cluster.json``), :mod:`.translate` maps one node's allocation through it (pure), and
:mod:`.renumber` applies that to the start bodies the daemon sends, saying once per
subcluster where it could not.
"""
