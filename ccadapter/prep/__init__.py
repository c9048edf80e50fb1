"""Prolog/Epilog fast path. Keep this package's ``__init__`` free of imports: the hook
(:mod:`ccadapter.prep.hook`) runs for every job on the controller and may load only the
standard library."""
