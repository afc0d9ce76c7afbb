# Restore job: recreate the workload's files, `criu restore` the images from the host, continue
# the restored tree, ask it to check itself, and send back its log.
. /run/ovm/in/common.sh
[ -f /run/ovm/in/net.sh ] && . /run/ovm/in/net.sh
tar -x -f /run/ovm/in/files.tar -C /run/ovm || fail "cannot unpack the workload's files"
eval "$RESTORE_PREPARE"
BEFORE=$(wc -c < "$W.log")
mkdir -p out
IMAGES=/run/ovm/in/images
CHECK_TENTHS=450  # busy workloads under TCG check over seconds
if [ -n "$IMAGES_PORT" ]; then
    # The pagemaps and pages come from the host's dump through criu page-server, the other
    # images after them as a tar
    network_up
    busybox nc -l -p "$TAR_PORT" > /run/ovm/images.tar < /dev/null &
    TAR_NC=$!
    r=1  # each round's server has the round before as its parent, as criu's migrations chain pre-dumps
    while [ $r -le "$PAGE_SERVER_ROUNDS" ]; do
        PARENT=""; [ $r -gt 1 ] && PARENT="--prev-images-dir ../$((r - 1))"
        serve_pages_once "/run/ovm/net-images/$r" "$IMAGES_PORT" "/run/ovm/out/page-server-$r.log" $PARENT
        r=$((r + 1))
    done
    IMAGES=/run/ovm/net-images/$PAGE_SERVER_ROUNDS
    wait $TAR_NC
    tar -x -f /run/ovm/images.tar -C "$IMAGES" || fail "the other images did not come whole"
fi
if [ -n "$LAZY_PORT" ]; then
    # Post-copy: the daemon asks the host's server for each page the restored tree faults on,
    # and for the rest in the background; the restore connects to it through its socket
    network_up
    criu lazy-pages --page-server --address "$LAZY_ADDRESS" --port "$LAZY_PORT" -D "$IMAGES" \
        -o /run/ovm/out/lazy-pages.log -v4 &
    LAZY_PID=$!
    i=0
    until [ -S "$IMAGES/lazy-pages.socket" ]; do
        i=$((i + 1)); [ $i -gt 300 ] && fail "criu lazy-pages did not start: $(tail -n 3 out/lazy-pages.log | tr '\n' ' ')"
        sleep 0.1
    done
    CRIU_RESTORE_OPTS="$CRIU_RESTORE_OPTS --lazy-pages"
    CHECK_TENTHS=3000  # each fault waits for its page over QEMU's user network
fi
if [ "$GOLDEN_TOOL" = runc ]; then
    # `runc restore` of a `runc checkpoint`, run as runc-box.sh runs runc (RESTORE_PREPARE made
    # its sysroot and bundle); the container's stdio again pipes, stdout to a cat appending to
    # the workload log (runc hands its own stdio to criu for the pipes in descriptors.json)
    SYSROOT=/run/runc-sysroot
    mkdir -p "$SYSROOT/ovm-checkpoint/work"
    cp -a "$IMAGES" "$SYSROOT/ovm-checkpoint/images"
    rm -f /run/ovm/out/runc-restore.rc
    true | {
        PATH=/usr/sbin:/usr/bin:/sbin:/bin unshare -m --propagation private sh -c "cd '$SYSROOT' &&
            mount --move . / && exec chroot . /usr/sbin/runc --root /run/runc restore --detach \
            --pid-file /run/ovm-runc.pid --image-path /ovm-checkpoint/images --work-path /ovm-checkpoint/work \
            --bundle /bundle $CRIU_RESTORE_OPTS ovm-runc" 2>/run/ovm/out/runc-restore.err
        echo $? > /run/ovm/out/runc-restore.rc
    } | cat >> "/run/ovm/$W.log" &
    i=0
    until [ -s /run/ovm/out/runc-restore.rc ]; do
        i=$((i + 1)); [ $i -gt 1200 ] && break
        sleep 0.1
    done
    rc=$(cat /run/ovm/out/runc-restore.rc 2>/dev/null || echo timeout)
    cp "$SYSROOT/ovm-checkpoint/work/restore.log" /run/ovm/out/restore.log 2>/dev/null
    cp "$SYSROOT/run/ovm-runc.pid" /run/ovm/out/root.pid 2>/dev/null
    [ "$rc" = 0 ] || rc=1
else
criu restore -D "$IMAGES" -o /run/ovm/out/restore.log -v4 -d --pidfile /run/ovm/out/root.pid $CRIU_RESTORE_OPTS
rc=$?
fi
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
    i=$((i + 1)); [ $i -gt $CHECK_TENTHS ] && break
    sleep 0.1
done
sleep 1
if [ -n "$LAZY_PORT" ]; then
    i=0  # the daemon ends once it has every page (or the tree is gone)
    while kill -0 $LAZY_PID 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 3000 ] && fail "criu lazy-pages did not end: $(tail -n 3 out/lazy-pages.log | tr '\n' ' ')"
        sleep 0.1
    done
fi
kill -STOP -"$ROOT" 2>/dev/null
tail -c +$((BEFORE + 1)) "$W.log" > out/after.log
cp "$W.log" out/full.log
tar -c -f /dev/vdb out || fail "writing results to /dev/vdb"
sync
ctl "DONE"
