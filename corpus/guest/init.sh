#!/bin/busybox sh
# Generic corpus guest init: set up what criu and the harness need, unpack the job the host
# put on /dev/vda (a plain tar stream), run it, power off. The job talks to the host over
# /dev/ttyS1 (control channel) and writes bulk results to /dev/vdb (another tar stream).
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# the links udev makes on every distribution; without /dev/fd, 5.10's execveat() of a file
# descriptor fails with ENOENT (measured), and runc re-executes itself that way (fexecve)
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mkdir -p /dev/pts /dev/shm /sys/fs/cgroup
mount -t devpts -o ptmxmode=0666 devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# rootfs is not a mount criu can resolve paths on; a tmpfs /run is where workloads live
for m in $(cat /lib/modules/load-order); do
    insmod /lib/modules/$m.ko || echo "OVM-INIT: insmod $m failed"
done
ip link set lo up
# khugepaged collapsing a workload's pages while the VM is paused leaves a page table half
# rewritten in the snapshot; keep huge pages at fault time, stop the background collapsing
# (a PREEMPT_RT build has no transparent huge pages at all)
khugepaged=/sys/kernel/mm/transparent_hugepage/khugepaged
[ -d $khugepaged ] && echo 86400000 > $khugepaged/scan_sleep_millisecs
stty -F /dev/ttyS1 raw -echo clocal -hupcl
mkdir -p /run/ovm/in
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda ] && break; sleep 0.2; done
tar -x -f /dev/vda -C /run/ovm/in || echo "OVM-INIT: no job tar on /dev/vda"
echo "OVM-INIT: running job"
sh /run/ovm/in/job.sh
rc=$?
echo "OVM-EXIT $rc"
echo "OVM-EXIT $rc" > /dev/ttyS1
sync
poweroff -f
