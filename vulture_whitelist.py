"""Names vulture cannot see used (the dead-code check's false positives), each with why.

vulture reads this file as if it were code: an attribute named here counts as used."""

# ruff: noqa
# mypy: ignore-errors

_ = object()

# Frameworks call these by name: Click commands, pytest hooks and markers, Volatility 3 plugin
# and layer hooks (requirements, class attributes the framework reads).
_.list_cmd  # corpus/__main__.py: `python -m corpus list`
_.convert  # cli.py: `ovm-offline convert`
_.pytest_collection_modifyitems
_.pytestmark
_.Ps  # plugins/linux/ovm.py: linux.ovm.Ps
_.Dump  # plugins/linux/ovm.py: linux.ovm.Dump
_.CrossView  # plugins/linux/ovm.py: linux.ovm.CrossView
_.get_requirements
_.minimum_address
_.dependencies
_.stack_order
_.progress_callback
_.__getattr__  # sources/__init__.py: Python calls a module's __getattr__ for a name it lacks (PEP 562)

# Fields of protobuf messages, set by assignment (the generated classes are not read).
_.blk_sigset
_.rseq_cs_pointer
_.pdeath_sig
_.stop_signo
_.iusec
_.vusec
_.futex_rla
_.futex_rla_len
_.symlnk_target
_.is_threaded

# Fields of dataclasses and NamedTuples that mirror a format or the kernel's layout: every
# field is part of the record even where no code reads it (registers in user_regs_struct
# order, ELF and kdump headers, the IPC namespace's sysctls).
_.r15, _.r14, _.r13, _.r12, _.bp, _.bx, _.r11, _.r10, _.r9, _.r8, _.cx, _.dx, _.si, _.fs_base, _.gs
_.pending_mask
_.shared_pending_mask
_.msg_next_id, _.sem_next_id, _.shm_next_id
_.e_shentsize, _.p_flags, _.p_align
_.total_ram_blocks, _.device_blocks, _.written_blocks, _.current_cpu, _.dump_level
_.start_pfn, _.end_pfn, _.offset_eraseinfo, _.size_eraseinfo, _.start_pfn_64, _.end_pfn_64
_.page_flags
_.sender  # an skb's sending socket: part of QueuedSkb as the kernel queues it
_.time_for_children  # nsproxy's namespaces, listed whole

# Read by a person, not by code: the API the lazy-ISF test walks, and a restore result's log.
_.member_names  # ktypes: every member of a struct (the symbol-cache test reads them all)
_.log_after  # corpus restore result: the workload's log after restore, for a failing test's reader

# tarfile.TarInfo fields a tmpfs archive's members carry: tarfile writes them into the header.
_.linkname, _.devmajor, _.devminor

# Called by the dataclasses module as its ``exec`` (dataclass_code.install).
_.__call__

# A kernel feature row's evidence: the ISF fact that stands for the feature, said in the row
# for whoever checks or adds one (kernel/core/features.py).
_.evidence

# the interpreter calls sys.unraisablehook (ovm_offline/__main__.py installs one)
_.unraisablehook
