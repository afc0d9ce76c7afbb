# Sourced by the jobs that use the network (after common.sh): the NIC's modules come on the
# input disk (the initramfs stays as every recording has it), and QEMU's user network gives
# the guest 10.0.2.15.
network_up() {
    for m in $(cat /run/ovm/in/netmods/load-order); do
        insmod "/run/ovm/in/netmods/$m.ko" || fail "insmod $m failed"
    done
    { ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0; } || fail "no network device: $(ip link | tr '\n' ' ')"
}

# Start criu page-server on $1 (its images directory) and port $2, with any further options;
# once it listens, tell the host NETWORK-READY, and wait until it has ended.
serve_pages_once() {
    dir=$1 port=$2 log=$3
    shift 3
    rm -f /run/ovm/page-server.pid
    mkdir -p "$dir"
    criu page-server -D "$dir" --port "$port" -o "$log" -v4 --daemon --pidfile /run/ovm/page-server.pid "$@" ||
        fail "criu page-server exited $?: $(grep Error "$log" | tail -n 2 | tr '\n' ' ')"
    ctl "NETWORK-READY"
    i=0  # the page server ends once the dump's final status is answered
    while kill -0 "$(cat /run/ovm/page-server.pid)" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 3000 ] && fail "criu page-server did not end: $(tail -n 3 "$log" | tr '\n' ' ')"
        sleep 0.1
    done
    # (kerndat's probes log errors of their own, such as tun's: only the transfer's count)
    ERR=$(grep "Error (criu/page-xfer.c" "$log" | tail -n 3 | tr '\n' ' ')
    [ -z "$ERR" ] || fail "criu page-server: $ERR"
}
