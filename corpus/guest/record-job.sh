# Record job: start the workload at a high PID, wait for READY, stop its process group (unless
# MOMENT is as-is: then the tree runs on, as a user's VM does), collect in-guest facts, let the
# host dump memory while paused, then have criu write golden images.
. /run/ovm/in/common.sh
mkdir -p "/run/ovm/$PROG"
echo $((HIGH_PID - 1)) > /proc/sys/kernel/ns_last_pid
/bin/$PROG $ARGS </dev/null >>"/run/ovm/$W.log" 2>&1 3>&- &
LAUNCHED=$!
# with ROOT_KEY, the READY line that names the root (a container's own program may say READY
# first, in the same log)
PATTERN='^READY'
[ -n "$ROOT_KEY" ] && PATTERN="^READY.* $ROOT_KEY="
i=0
while ! grep -qs "$PATTERN" "$W.log"; do
    grep -qs '^SETUP FAIL' "$W.log" && fail "$(grep -m1 '^SETUP FAIL' "$W.log")"
    i=$((i + 1)); [ $i -gt 3000 ] && fail "no READY from $PROG: $(tail -c 300 "$W.log" | tr '\n' ' ')"
    sleep 0.1
done
READY=$(grep -m1 "$PATTERN" "$W.log")
ROOT=$LAUNCHED
if [ -n "$ROOT_KEY" ]; then
    ROOT=$(echo "$READY" | sed -n "s/.* $ROOT_KEY=\([0-9]*\).*/\1/p")
    [ -n "$ROOT" ] || fail "READY line has no $ROOT_KEY: $READY"
fi
sleep "$SETTLE"
if [ "$MOMENT" = stopped ]; then
    kill -STOP -"$ROOT" || fail "cannot stop process group $ROOT"
    wait_stopped "$ROOT"
    # Let interval timers (1 s in the workloads) fire once while stopped: their signal is then
    # pending in the memory snapshot as in criu's dump seconds later (non-RT signals collapse)
    sleep 1.5
fi
MEMBERS=$(group_pids "$ROOT" | sort -n | tr '\n' ' ')

# In-guest facts, read from /proc while the group is stopped (the state the dumps show; as-is,
# a moment before the host pauses the guest).
procfacts collect facts $MEMBERS || fail "reading /proc failed"
uname -r > facts/uname
echo "$READY" > facts/ready
echo "$ROOT" > facts/root
echo "$MEMBERS" > facts/members

ctl "RECORD-READY root=$ROOT members=$MEMBERS"
ctl_read go
[ "$go" = "GO" ] || fail "expected GO from the host, got: $go"
echo "OVM-JOB: host recorded memory; running criu dump"

# Golden images: criu's own dump of the same tree (as-is: of the tree running on, seconds later);
# none for a tree criu refuses too (CRIU_GOLDEN=no): an empty directory and rc 0.
mkdir -p /run/ovm/golden
start=$(date +%s)
rc=0
if [ "$CRIU_GOLDEN" = yes ]; then
    criu dump -t "$ROOT" -D /run/ovm/golden -o dump.log -v4 --leave-running $CRIU_DUMP_OPTS
    rc=$?
elif [ "$CRIU_GOLDEN" = runc ]; then
    # a runc container: `runc checkpoint` (criu swrk underneath) run as runc-box.sh runs runc,
    # from its chroot; the image and work directories live inside that sysroot
    SYSROOT=/run/runc-sysroot
    mkdir -p "$SYSROOT/ovm-checkpoint/images" "$SYSROOT/ovm-checkpoint/work"
    # (in a mount namespace of its own with the sysroot moved onto /, as runc-box.sh runs runc;
    # GNU tar in /usr/bin before busybox's for criu). runc always passes criu --empty-ns network:
    # the network namespace is recreated empty on restore, only its conntrack table is dumped.
    PATH=/usr/sbin:/usr/bin:/sbin:/bin unshare -m --propagation private sh -c "cd '$SYSROOT' &&
        mount --move . / && exec chroot . /usr/sbin/runc --root /run/runc checkpoint --leave-running \
        --image-path /ovm-checkpoint/images --work-path /ovm-checkpoint/work $CRIU_DUMP_OPTS ovm-runc" \
        >facts/runc-checkpoint.out 2>&1
    rc=$?
    cp -a "$SYSROOT/ovm-checkpoint/images/." /run/ovm/golden/
    cp "$SYSROOT/ovm-checkpoint/work/dump.log" /run/ovm/golden/dump.log 2>/dev/null
    ls -la "$SYSROOT/ovm-checkpoint/images" "$SYSROOT/ovm-checkpoint/work" > facts/runc-checkpoint.ls 2>&1
fi
echo "OVM-JOB: criu dump exited $rc"
echo "criu_dump_rc=$rc seconds=$(( $(date +%s) - start ))" > facts/criu
[ $rc -eq 0 ] || { cp /run/ovm/golden/dump.log facts/ 2>/dev/null;
    tar -c -f /dev/vdb facts; fail "criu dump exited $rc: $(grep Error /run/ovm/golden/dump.log | tail -n 3 | tr '\n' ' ')"; }
# The workload's files as they are at dump time: the restore harness recreates them (with
# the directory $PROG.files a workload program keeps its own files in, if it has one).
tar -c -f files.tar "$W.log" "$PROG" $([ -d "$PROG.files" ] && echo "$PROG.files")
tar -c -f /dev/vdb facts golden files.tar || fail "writing results to /dev/vdb"
sync
ctl "DONE"
