# Restore job: recreate the workload's files, `criu restore` the images from the host, continue
# the restored tree, ask it to check itself, and send back its log.
. /run/ovm/in/common.sh
tar -x -f /run/ovm/in/files.tar -C /run/ovm || fail "cannot unpack the workload's files"
eval "$RESTORE_PREPARE"
BEFORE=$(wc -c < "$W.log")
mkdir -p out
criu restore -D /run/ovm/in/images -o /run/ovm/out/restore.log -v4 -d --pidfile /run/ovm/out/root.pid $CRIU_RESTORE_OPTS
rc=$?
if [ $rc -ne 0 ]; then
    tar -c -f /dev/vdb out
    fail "criu restore exited $rc: $(grep Error /run/ovm/out/restore.log | tail -n 3 | tr '\n' ' ')"
fi
# The restored root's pid in this guest (a PID namespace init is renumbered outside it).
ROOT=$(cat /run/ovm/out/root.pid)
[ -d "/proc/$ROOT" ] || fail "restored root $ROOT is not running"
kill -CONT -"$ROOT"
sleep "$RUN_AFTER_RESTORE"
kill -USR1 "$ROOT" || fail "restored root $ROOT is gone"
i=0
while ! tail -c +$((BEFORE + 1)) "$W.log" | grep -q '^CHECK'; do
    i=$((i + 1)); [ $i -gt 450 ] && break  # busy workloads under TCG check over seconds
    sleep 0.1
done
sleep 1
kill -STOP -"$ROOT" 2>/dev/null
tail -c +$((BEFORE + 1)) "$W.log" > out/after.log
cp "$W.log" out/full.log
tar -c -f /dev/vdb out || fail "writing results to /dev/vdb"
sync
ctl "DONE"
