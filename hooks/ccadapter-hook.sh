#!/bin/bash -p
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

# A TCP socket (prepSockConnectPath "tcp:HOST:PORT") is told by bash alone, with builtins
# only: no program is started, so a job costs slurmctld's controller a bash start, not a
# Python interpreter's (BENCHMARKS.md, "What the hook costs the controller"). It sends the
# five keys the daemon reads; anything this cannot say exactly (a UNIX socket, a config it
# may not read, a value with control or non-ASCII characters) goes to the Python hook below.
# -p: BASH_ENV and exported functions are not read from the environment.
python_hook() {
    # The hook module inside the venv, whatever its Python version (a glob: no interpreter
    # is started for it). -I -S: no site-packages, no environment; importing hook (not
    # running hook.py as a script) uses its compiled form.
    for PREP in "$VENV"/lib/python3*/site-packages/ccadapter/prep; do :; done
    "$VENV/bin/python3" -I -S -c "import sys; sys.path.insert(0, '$PREP'); import hook; sys.exit(hook.main())" \
        --config "$CONFIG" "$@"
    exit 0
}

spec= text=
[[ -r $CONFIG ]] && IFS= read -r -d '' text <"$CONFIG" 2>/dev/null  # to its end: no NUL in it
shopt -s nocasematch
[[ $text =~ \"prepsockconnectpath\"[[:space:]]*:[[:space:]]*\"([^\"\\]*)\" ]] && spec=${BASH_REMATCH[1]}
shopt -u nocasematch
[[ ${spec,,} == tcp:* && $# == 0 ]] || python_hook "$@"
rest=${spec#*:}
port=${rest##*:}
host=${rest%:*}
host=${host#[}
host=${host%]}
[[ $port =~ ^[0-9]{1,5}$ && $port -ge 1 && $port -le 65535 ]] || python_hook "$@"
[[ -n $host ]] || host=127.0.0.1

msg='{'
for key in SLURM_SCRIPT_CONTEXT SLURM_JOB_ID SLURM_CLUSTER_NAME SLURM_ARRAY_JOB_ID; do
    [[ -v $key ]] || continue
    value=${!key}
    [[ $value == *[![:print:]]* || $value == *[^[:ascii:]]* ]] && python_hook "$@"
    value=${value//\\/\\\\}
    msg+="\"$key\":\"${value//\"/\\\"}\","
done
sent=${EPOCHREALTIME/,/.}  # a locale's decimal comma; bash before 5.0 has none
[[ -n $sent ]] && msg+="\"CCADAPTER_HOOK_SENT\":\"$sent\","
msg="${msg%,}}"

# The connection, in a child bash (a fork, no program), so that a daemon whose listen queue
# is full cannot hold the job longer than the hook's second: the parent waits for the
# child's word at most that long. A newline ends the message (bash cannot shut one side of
# a socket, as the Python hook does); the child stays connected for the daemon's "ok", since
# the daemon tells slurmctld's own hooks from other senders by the uid of an open socket.
exec {from_child}< <(
    exec 2>/dev/null
    if ! exec 3<>"/dev/tcp/$host/$port"; then
        echo "$spec refused the connection"
    elif ! printf '%s\n' "$msg" >&3; then
        echo "writing to $spec failed"
    elif IFS= read -r -t 1 -u 3 ok && [[ $ok == ok ]]; then
        echo sent
    else
        echo "the daemon at $spec did not take the message (its log says why)"
    fi
)
child=$!
IFS= read -r -t 1 -u "$from_child" said
case $? in
    0) ;;
    1) said="the connection to $spec failed" ;;
    *) said="no connection to $spec within 1 s"; kill "$child" 2>/dev/null ;;
esac
[[ $said == sent ]] ||
    echo "ccadapter hook: job ${SLURM_JOB_ID:-?}: daemon not told ($said); the poll will pick the job up" >&2
exit 0
