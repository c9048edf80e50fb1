#!/bin/sh
# PrologSlurmctld / EpilogSlurmctld program of ccadapter. In slurm.conf:
#   PrEpPlugins=prep/script
#   PrologSlurmctld=/etc/slurm/ccadapter-hook.sh
#   EpilogSlurmctld=/etc/slurm/ccadapter-hook.sh
# It tells the daemon (prepSockConnectPath of the config file) that a job starts or ends and
# ALWAYS exits 0: a failing PrologSlurmctld would hold jobs. Problems go to stderr, which
# slurmctld logs. It gives up after one second; the daemon's poll catches what it misses.
# It runs as SlurmUser and needs no secret: it reads the config file for prepSockConnectPath
# only (keep the JWT in ccRestJwtFile; an unreadable config means the default socket).
#
# Set these to your installation (the venv ccadapter was installed into, and its config):
VENV=/opt/ccadapter
CONFIG=/etc/cc-slurm-adapter/config.json

# The hook module inside the venv, whatever its Python version (a glob: no interpreter is
# started for it). -I -S: no site-packages, no environment; importing hook (not running
# hook.py as a script) uses its compiled form. The interpreter's start is nearly all it costs.
for PREP in "$VENV"/lib/python3*/site-packages/ccadapter/prep; do :; done
"$VENV/bin/python3" -I -S -c "import sys; sys.path.insert(0, '$PREP'); import hook; sys.exit(hook.main())" \
    --config "$CONFIG" "$@"
exit 0
