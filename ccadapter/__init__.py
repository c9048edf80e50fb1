"""ccadapter: Slurm job information for ClusterCockpit's cc-backend."""

__version__ = "0.1.0"
