#!/bin/sh
# runc-box - pipetree in an OCI container that runc 1.1 makes from its default spec
# (/etc/ovm/runc-config.json: `runc spec` with pipetree as the process, a writable root, host
# name ovm-runc and a cgroup namespace added): mount, UTS, IPC, network, PID and cgroup
# namespaces, a root reached through pivot_root, the spec's /proc, /dev, /dev/pts, /dev/shm,
# /dev/mqueue, /sys and cgroup2 mounts with its masked and read-only paths, cgroup /ovm-runc.
#
# pivot_root(2) refuses a process whose root is the initramfs (rootfs has no parent mount), as
# on a machine booted without a root disk; runc then runs from a chroot into a tmpfs that
# holds the guest's /bin, /lib, /usr and /etc, as a real root file system would.
#
# pipetree runs as `pipetree box /data/log`: a UNIX socket pair in its ring, a file under the
# bind mount /data that it keeps appending to, and a check of its host name and mounts.
#
# READY lines: pipetree's own (READY root=1 ...), then READY container_init=PID (its PID as the
# guest's init sees it) id=ovm-runc
set -eu
ID=ovm-runc
CONFIG=runc-config.json
PREPARE=
OWNER=
# the container's config (initramfs.py derives each from runc-config.json) and its READY
# line; `inet`: the inet workload's established TCP connections over the container's own
# loopback instead of pipetree; `inet-stream`: its TCP stream from a fast writer thread to a
# slow reader thread; `seccomp`: pipetree under a seccomp profile shaped like Docker's default
INET=
READY_LINE='^READY root=1 '
for arg in "$@"; do
    case "$arg" in
    prepare) PREPARE=1 ;;
    userns) CONFIG=runc-config-userns.json; OWNER=100000:100000 ;;
    seccomp) CONFIG=runc-config-seccomp.json ;;
    inet) CONFIG=runc-config-inet-established.json; INET=1; READY_LINE='^READY pid=' ;;
    inet-stream) CONFIG=runc-config-inet-stream.json; INET=1; READY_LINE='^READY pid=' ;;
    esac
done
SYSROOT=/run/runc-sysroot
BUNDLE=/bundle
mkdir -p "$SYSROOT"
mount -t tmpfs -o mode=755 sysroot "$SYSROOT"
cp -a /bin /lib /usr /etc "$SYSROOT/"
[ -e /lib64 ] && cp -a /lib64 "$SYSROOT/"
# a criu of another suite lives under /opt with its own libraries (corpus/suite_criu.py)
[ -e /opt ] && cp -a /opt "$SYSROOT/"
for d in proc sys dev run tmp; do mkdir -p "$SYSROOT/$d"; done
for d in proc sys dev; do mount --rbind "/$d" "$SYSROOT/$d"; done
# the container's writable bind mount /data (config.json: source /data of runc's root): the
# workload's own files, /run/ovm/runc-box.files, which the record job carries to a restore
DATA=/run/ovm/runc-box.files
mkdir -p "$DATA" "$SYSROOT/data"
mount --bind "$DATA" "$SYSROOT/data"

ROOTFS=$SYSROOT$BUNDLE/rootfs
mkdir -p "$ROOTFS"
cp -a /bin /lib /usr /etc "$ROOTFS/"
[ -e /lib64 ] && cp -a /lib64 "$ROOTFS/"
for d in proc sys dev run tmp data; do mkdir -p "$ROOTFS/$d"; done
cp "/etc/ovm/$CONFIG" "$SYSROOT$BUNDLE/config.json"
# the container's environment is its config's alone: the guest's glibc tunables go there too
# (on 5.10, where no program in the guest registers rseq, its processes do not either)
if [ -n "${GLIBC_TUNABLES:-}" ]; then
    sed -i "s|\"TERM=xterm\"|\"TERM=xterm\", \"GLIBC_TUNABLES=$GLIBC_TUNABLES\"|" "$SYSROOT$BUNDLE/config.json"
    grep -q GLIBC_TUNABLES "$SYSROOT$BUNDLE/config.json" || { echo "SETUP FAIL no env in $CONFIG"; exit 1; }
fi
if [ -n "$INET" ]; then
    # the prestart hook of the inet configs (runc_inet_config in initramfs.py)
    cat > "$SYSROOT/ovm-lo-up" <<'HOOK'
#!/bin/sh
# OCI prestart hook: the container's state on stdin, its first process's PID in it
pid=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p')
exec nsenter -t "$pid" -n ip link set lo up
HOOK
    chmod 755 "$SYSROOT/ovm-lo-up"
fi
# a user namespace's root owns the root file system and the data directory
[ -n "$OWNER" ] && chown -R "$OWNER" "$ROOTFS" "$DATA"
# `runc-box prepare`: only the sysroot and the bundle, for a `runc restore` of the container
[ -n "$PREPARE" ] && exit 0

# runc runs in a mount namespace of its own where the sysroot is moved onto / (as switch_root
# does): the container's root, after pivot_root, is then mounted on / of its namespace's root
# mount, as on a machine with a root disk; criu's dump (runc checkpoint) refuses a container
# root mounted anywhere else ("The root task has another root than mntns").
#
# runc passes its own stdin, stdout and stderr on to a detached container that has no terminal.
# They are pipes, as containerd gives: stdin one with no writer, stdout and stderr one to a cat
# that appends to this script's output (the workload log). criu dumps pipes; a file outside the
# container's mounts (the log itself, /dev/null) it cannot.
LOG=$(readlink /proc/$$/fd/1)
rm -f "/run/$ID.rc"
true | {
    unshare -m --propagation private sh -c "cd '$SYSROOT' && mount --move . / && exec chroot . \
        /usr/sbin/runc --root /run/runc run --detach --pid-file /run/$ID.pid --bundle '$BUNDLE' $ID" 2>&1
    echo $? > "/run/$ID.rc"
} | cat >> "$LOG" &
i=0
until [ -s "/run/$ID.rc" ]; do
    i=$((i + 1))
    [ $i -gt 600 ] && { echo "SETUP FAIL runc run did not finish"; exit 1; }
    sleep 0.1
done
rc=$(cat "/run/$ID.rc")
[ "$rc" = 0 ] || { echo "SETUP FAIL runc run exited $rc"; exit 1; }
i=0
until grep -qs "$READY_LINE" "$LOG"; do
    i=$((i + 1))
    [ $i -gt 300 ] && { echo "SETUP FAIL no READY from the container"; exit 1; }
    sleep 0.1
done
echo "READY container_init=$(cat "$SYSROOT/run/$ID.pid") id=$ID"
