# Page-server job: a destination that only receives. criu page-server writes what a dump sends
# (its pagemaps and pages) into net-images/, which goes back to the host on /dev/vdb.
. /run/ovm/in/common.sh
. /run/ovm/in/net.sh
mkdir -p out
network_up
serve_pages_once /run/ovm/out/net-images "$IMAGES_PORT" /run/ovm/out/page-server.log
tar -c -f /dev/vdb out || fail "writing results to /dev/vdb"
sync
ctl "DONE"
