#!/bin/sh
# PrologSlurmctld / EpilogSlurmctld program of ccadapter. In slurm.conf:
#   PrEpPlugins=prep/script
#   PrologSlurmctld=/etc/slurm/ccadapter-hook.sh
#   EpilogSlurmctld=/etc/slurm/ccadapter-hook.sh
# It tells the daemon (prepSockConnectPath of the config file) that a job starts or ends and
# ALWAYS exits 0: a failing PrologSlurmctld would hold jobs. Problems go to stderr, which
# slurmctld logs. It gives up after one second; the daemon's poll catches what it misses.
#
# Set the two paths to your installation (with a venv in /opt/ccadapter, print the second with
#   /opt/ccadapter/bin/python -c 'import ccadapter.prep.hook as h; print(h.__file__)'):
PYTHON=/opt/ccadapter/bin/python3
HOOK_PY=/opt/ccadapter/lib/python3.11/site-packages/ccadapter/prep/hook.py
CONFIG=/etc/cc-slurm-adapter/config.json

# -I -S: no site-packages, no environment: the interpreter's start is all it costs.
"$PYTHON" -I -S "$HOOK_PY" --config "$CONFIG" "$@"
exit 0
