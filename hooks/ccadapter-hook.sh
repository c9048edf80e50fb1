#!/bin/sh
# PrologSlurmctld / EpilogSlurmctld program of ccadapter. In slurm.conf:
#   PrEpPlugins=prep/script
#   PrologSlurmctld=/etc/slurm/ccadapter-hook.sh
#   EpilogSlurmctld=/etc/slurm/ccadapter-hook.sh
# It tells the daemon (prepSockConnectPath of the config file) that a job starts or ends and
# ALWAYS exits 0: a failing PrologSlurmctld would hold jobs. Problems go to stderr, which
# slurmctld logs. It gives up after one second; the daemon's poll catches what it misses.
#
# Set the paths to your installation (with a venv in /opt/ccadapter, print PREP with
#   /opt/ccadapter/bin/python -c 'import ccadapter.prep, os; print(os.path.dirname(ccadapter.prep.__file__))'):
PYTHON=/opt/ccadapter/bin/python3
PREP=/opt/ccadapter/lib/python3.11/site-packages/ccadapter/prep
CONFIG=/etc/cc-slurm-adapter/config.json

# -I -S: no site-packages, no environment; importing hook (not running hook.py as a script)
# uses its compiled form. The interpreter's start is nearly all it costs.
"$PYTHON" -I -S -c "import sys; sys.path.insert(0, '$PREP'); import hook; sys.exit(hook.main())" \
    --config "$CONFIG" "$@"
exit 0
