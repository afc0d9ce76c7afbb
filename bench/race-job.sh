# bench_race.py's guest job: memhog of $MIB MiB (the process both sides save), the other work
# ($LOAD: cpu, pipe, disk, fs or none, counting what it gets done), then the host's commands
# over the control port, one at a time: COUNT (the load's counter), CRIU (criu dump
# --leave-running of memhog, timed by the guest's clock), QUIT.
. /run/ovm/in/common.sh
LOADER=/run/ovm/in/race-load
RACE=/run/ovm/race
mkdir -p "$RACE/fs" && cd "$RACE/fs" || fail "no $RACE/fs"
if [ "$LOAD" != none ]; then
    "$LOADER" "$LOAD" "$RACE/ops" /dev/vdc </dev/null >"$RACE/load.log" 2>&1 3>&- &
fi
/bin/memhog $MIB </dev/null >"$RACE/memhog.log" 2>&1 3>&- &
ROOT=$!
i=0
while ! grep -qs '^READY' "$RACE/memhog.log"; do
    i=$((i + 1)); [ $i -gt 6000 ] && fail "no READY from memhog: $(tail -c 300 "$RACE/memhog.log")"
    sleep 0.1
done
ctl "RACE-READY root=$ROOT"
while ctl_read command; do
    case "$command" in
    COUNT)
        ctl "COUNT $("$LOADER" count "$RACE/ops")"
        ;;
    CRIU)
        rm -rf "$RACE/criu" && mkdir "$RACE/criu"
        t0=$("$LOADER" now)
        criu dump -t "$ROOT" -D "$RACE/criu" -o dump.log --leave-running --display-stats $CRIU_DUMP_OPTS \
            >"$RACE/criu.out" 2>&1
        rc=$?
        t1=$("$LOADER" now)
        frozen=$(sed -n 's/.*Frozen time: *\([0-9]*\).*/\1/p' "$RACE/criu.out" "$RACE/criu/dump.log" | head -n 1)
        [ $rc -eq 0 ] || ctl "CRIU-LOG $(grep Error "$RACE/criu/dump.log" | tail -n 2 | tr '\n' ' ')"
        rm -rf "$RACE/criu"
        ctl "CRIU rc=$rc ns=$((t1 - t0)) frozen_us=${frozen:-none}"
        ;;
    QUIT)
        break
        ;;
    esac
done
