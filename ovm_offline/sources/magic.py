"""What each kind of dump file starts with, apart from its reader, so that telling the kinds
apart imports none of them."""

#: include/uapi/linux/elf.h ELFMAG
ELF_MAGIC = b"\x7fELF"
#: makedumpfile's flattened format (a stream of records, what QEMU writes for kdump-*)
FLAT_SIGNATURE = b"makedumpfile"
#: diskdump.h KDUMP_SIGNATURE (a plain, seekable kdump-compressed file)
KDUMP_SIGNATURE = b"KDUMP   "
