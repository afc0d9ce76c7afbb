# bench_migrate.py's source guest: memhog of $MIB MiB rewriting PERMILLE per mille of its pages a
# second, then the host's commands over the control port: ROUND N (criu pre-dump to the page
# server the host forwards 10.0.2.100:27000 to), FINAL N (criu dump to it, then the other images
# as a tar on /dev/vdb for the host to send on), QUIT.
. /run/ovm/in/common.sh
. /run/ovm/in/net.sh
network_up
MIG=/run/mig
mkdir -p "$MIG" && cd "$MIG" || fail "no $MIG"
/bin/memhog "$MIB" write "$PERMILLE" </dev/null >"$MIG/memhog.log" 2>&1 3>&- &
ROOT=$!
i=0
while ! grep -qs '^READY' "$MIG/memhog.log"; do
    i=$((i + 1)); [ $i -gt 6000 ] && fail "no READY from memhog: $(tail -c 300 "$MIG/memhog.log")"
    sleep 0.1
done
ctl "MIGRATE-READY root=$ROOT log_bytes=$(wc -c < "$MIG/memhog.log")"
while ctl_read command; do
    set -- $command
    case "$1" in
    ROUND|FINAL)
        n=$2
        PARENT=""; [ "$n" -gt 1 ] && PARENT="--prev-images-dir ../$((n - 1))"
        ACTION="pre-dump"; [ "$1" = FINAL ] && ACTION=dump
        mkdir -p "$MIG/$n"
        criu $ACTION -t "$ROOT" -D "$MIG/$n" $PARENT --track-mem --page-server --address 10.0.2.100 --port 27000 \
            -o dump.log $CRIU_DUMP_OPTS >"$MIG/criu-$n.out" 2>&1
        rc=$?
        [ $rc -eq 0 ] || ctl "CRIU-LOG $(grep Error "$MIG/$n/dump.log" | tail -n 2 | tr '\n' ' ')"
        if [ "$1" = FINAL ] && [ $rc -eq 0 ]; then
            # the other images go to the host on /dev/vdb; it sends them on, as it sends ovm-offline's
            { tar -c -f /dev/vdb -C "$MIG/$n" . && sync; } || rc=99
        fi
        ctl "$1 rc=$rc"
        ;;
    QUIT)
        break
        ;;
    esac
done
