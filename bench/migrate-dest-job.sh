# bench_migrate.py's destination guest: criu page-server for each of $ROUNDS rounds (each with
# the round before as its parent), the other images as a tar on port 27001, then `criu restore`;
# RESTORED goes to the host as soon as the tree runs, then the restored memhog checks every page.
. /run/ovm/in/common.sh
. /run/ovm/in/net.sh
network_up
mount -o remount,size=95% /run || fail "cannot grow /run"  # the rounds' pages, beside the restored tree
MIG=/run/mig
mkdir -p "$MIG" && cd "$MIG" || fail "no $MIG"
busybox nc -l -p 27001 > /run/images.tar < /dev/null &
TAR_NC=$!
r=1
while [ $r -le "$ROUNDS" ]; do
    PARENT=""; [ $r -gt 1 ] && PARENT="--prev-images-dir ../$((r - 1))"
    serve_pages_once "$MIG/$r" 27000 "/run/page-server-$r.log" $PARENT
    r=$((r + 1))
done
wait $TAR_NC
tar -x -f /run/images.tar -C "$MIG/$ROUNDS" || fail "the other images did not come whole"
head -c "$LOG_BYTES" /dev/zero | tr '\0' '\n' > "$MIG/memhog.log"  # its stdout, as big as criu saw it
criu restore -D "$MIG/$ROUNDS" -o /run/restore.log -v4 -d --pidfile /run/root.pid $CRIU_RESTORE_OPTS
rc=$?
ctl "RESTORED rc=$rc"
[ $rc -eq 0 ] || fail "criu restore: $(grep Error /run/restore.log | tail -n 2 | tr '\n' ' ')"
kill -CONT -"$(cat /run/root.pid)" 2>/dev/null  # as the corpus's restores do
sleep 1
kill -USR1 "$(cat /run/root.pid)"
i=0
until grep -qs '^CHECK' "$MIG/memhog.log"; do
    i=$((i + 1)); [ $i -gt 3000 ] && fail "no CHECK from the restored memhog"
    sleep 0.1
done
ctl "$(grep '^CHECK' "$MIG/memhog.log" | tail -n 1)"
