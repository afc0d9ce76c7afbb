# Sourced by the job scripts. The host prepends: W (workload), PROG, ARGS, ROOT_KEY, HIGH_PID.
cd /run/ovm || exit 1
# One fd on the control port for the whole job: bytes the host sends while no one holds the
# tty open are dropped, so reopening it per message would lose them.
exec 3<>/dev/ttyS1
ctl() { echo "$*" >&3; echo "OVM-CTL: $*"; }
ctl_read() { read -r "$1" <&3; }
fail() { ctl "FAIL $*"; exit 1; }

# The state of every task (threads included) whose process group is $1, one per line.
group_tasks() { procfacts group-states "$1"; }

# The pids (processes, not threads) whose process group is $1.
group_pids() { procfacts group "$1"; }

wait_stopped() {
    i=0
    # a zombie (Z) has ended: it cannot stop, and stays as it is
    while group_tasks "$1" | grep -qv '^[TZ]$'; do
        i=$((i + 1)); [ $i -gt 100 ] && fail "workload did not stop: $(group_tasks "$1" | tr '\n' ' ')"
        sleep 0.1
    done
}
