"""Which kernel a guest runs and where KASLR put it: `open_kernel(source, symbol_dirs)`.

* With VMCOREINFO (QEMU ``-device vmcoreinfo`` and the guest's ``qemu_fw_cfg``):
  KERNELOFFSET is the virtual KASLR shift, NUMBER(phys_base) the physical one,
  OSRELEASE narrows the ISF candidates and SYMBOL(swapper_pg_dir) cross-checks the
  choice; the banner at linux_banner must equal the ISF's.
* Without it: physical memory is scanned for ``Linux version `` and every hit is
  compared with the banners of the known ISFs.  A hit at physical P of a symbol
  linked at L gives D = P - L + __START_KERNEL_map = KERNELOFFSET + phys_base, so
  every kernel-image symbol's physical address is known; the page tables
  (init_top_pgt, then each vCPU's CR3) then tell which 2 MiB-aligned KERNELOFFSET
  maps L to P.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from ...errors import GuestDataError, LayoutError, SymbolError
from ...sources.base import PhysicalSource
from .memory import KASLR_MAX, START_KERNEL_MAP, U64, Program
from .paging import ADDR_MASK, CR4_LA57, KPTI_USER_BIT, PAGE_SIZE, PageTables, PhysicalRuns
from .symbols import (
    SymbolTable,
    banner_release,
    banner_text,
    isf_banners,
    load_isf,
    missing_isf_error,
    normalize_banner,
    repo_symbol_dir,
)

__all__ = ["open_kernel", "scan_banners"]

log = logging.getLogger("ovm_offline")
KASLR_ALIGN = 0x20_0000  # CONFIG_PHYSICAL_ALIGN: KERNELOFFSET is a multiple of 2 MiB
BANNER_SCAN_CHUNK = 16 << 20
#: how much guest memory (GiB) the banner search of a dump without VMCOREINFO reads: a guest's
#: kernel lies in its low memory, and a hostile or sparse dump may declare terabytes
BANNER_SCAN_GIB = 16
BANNER_SCAN_ENV = "OVM_BANNER_SCAN_GIB"
MAX_BANNER_HITS = 4096
MAX_BANNER_LEN = 1024
BANNER_PREFIX = b"Linux version "
#: (path of an ISF, its banner) of every ISF that may fit
Candidates = list[tuple[Path, bytes | None]]


def _vmcoreinfo_int(vmci: dict[str, str], key: str, base: int = 10) -> int | None:
    v = vmci.get(key)
    if v is None:
        return None
    v = v.strip()
    try:
        if v.lower().startswith(("0x", "-0x")):
            return int(v, 16)
        return int(v, base)
    except ValueError:
        return None


def _read_phys(source: PhysicalSource, runs: PhysicalRuns, paddr: int, size: int) -> bytes | None:
    if not runs.contains(paddr, size):
        return None
    return source.read(paddr, size)


def banner_scan_bytes() -> int:
    """The bound of the banner search: BANNER_SCAN_GIB, or $OVM_BANNER_SCAN_GIB."""
    raw = os.environ.get(BANNER_SCAN_ENV, "")
    try:
        gib = int(raw) if raw else BANNER_SCAN_GIB
    except ValueError:
        raise SymbolError(f"{BANNER_SCAN_ENV}={raw!r} is not a whole number of GiB") from None
    return max(gib, 0) << 30


def scan_banners(
    source: PhysicalSource, *, limit: int = MAX_BANNER_HITS, cut_short: list[int] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(physical address, text up to NUL) of each "Linux version " string in memory, in
    address order; bulk reads of 16 MiB, at most `limit` hits and `banner_scan_bytes()` read
    (what a source knows to be zero is skipped unread and not counted). Where the byte bound
    ended the search, the address it reached is appended to `cut_short`."""
    hits = 0
    plen = len(BANNER_PREFIX)
    budget = banner_scan_bytes()
    data_extent = getattr(source, "data_extent", None)  # sparse files: holes are skipped unread
    for run in source.runs():
        pos, end = run.start, run.start + run.length
        stop = pos if data_extent is not None else end  # the end of the stretch being read
        while pos < end:
            if pos >= stop and data_extent is not None:
                pos, stop = data_extent(pos, end)
                if pos >= end:
                    break
            if budget <= 0:
                if cut_short is not None:
                    cut_short.append(pos)
                return
            n = min(BANNER_SCAN_CHUNK, stop - pos)
            budget -= n
            data = source.read(pos, n)
            i = data.find(BANNER_PREFIX)
            while i >= 0:
                pa = pos + i
                text = data[i : i + MAX_BANNER_LEN]
                if len(text) < MAX_BANNER_LEN and pa + len(text) < end:
                    text = source.read(pa, min(MAX_BANNER_LEN, end - pa))
                yield pa, normalize_banner(text)
                hits += 1
                if hits >= limit:
                    return
                i = data.find(BANNER_PREFIX, i + 1)
            if pos + n >= stop:
                pos = stop  # a hole follows: zeros cannot continue a prefix
            else:
                pos += n - (plen - 1)  # overlap so a prefix split across chunks is found


def _looks_like_linux_banner(text: bytes) -> bool:
    # linux_banner is "Linux version REL (BUILDER) (COMPILER) #N ...\n"; printk copies lack the \n.
    return re.match(rb"Linux version \S+ \(.*\) .*#\d+.*\n$", text, re.S) is not None


def _guest_banner_for_message(source: PhysicalSource, release: str | None, cut_short: list[int]) -> bytes | str | None:
    best: bytes | None = None
    for _pa, text in scan_banners(source, limit=256, cut_short=cut_short):
        if release is not None and banner_release(text) != release:
            continue
        if _looks_like_linux_banner(text):
            return text
        if best is None and re.match(rb"Linux version \S+ ", text):
            best = text
    if best is not None:
        return best
    return f"Linux version {release}" if release else None


def _levels_options(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, vmci: dict[str, str] | None, d: int
) -> list[int]:
    """Paging levels in order of belief: VMCOREINFO, the kernel's own flag, vCPU CR4."""
    if vmci is not None:
        v = _vmcoreinfo_int(vmci, "NUMBER(pgtable_l5_enabled)")
        if v is not None:
            return [5 if v else 4]
    if symbols.has_symbol("__pgtable_l5_enabled"):
        pa = (symbols.symbol_address("__pgtable_l5_enabled") - START_KERNEL_MAP + d) & U64
        raw = _read_phys(source, runs, pa, 4)
        if raw is not None:
            return [5, 4] if int.from_bytes(raw, "little") else [4, 5]
    for cpu in source.vcpus():
        if cpu.cr4 is not None:
            return [5, 4] if cpu.cr4 & CR4_LA57 else [4, 5]
    return [4, 5]


class _Layout(NamedTuple):
    kaslr_offset: int
    phys_base: int
    levels: int
    root: int
    by_vcpu: bool  # verified through a vCPU's live CR3, not only the image's own tables


def _layouts_from_banner(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, banner_pa: int
) -> Iterator[_Layout]:
    """Layouts that put linux_banner at physical `banner_pa`, each verified through
    page tables: first through the vCPUs' CR3s (the live kernel), then through the
    image's own init_top_pgt (swapper_pg_dir)."""
    link = symbols.symbol_address("linux_banner")
    d = (banner_pa - link + START_KERNEL_MAP) & U64  # = KERNELOFFSET + phys_base
    roots: list[tuple[int, bool]] = []
    for cpu in source.vcpus():
        if cpu.cr3:
            # Under KPTI a vCPU in user mode holds the user root; the kernel's is below.
            r = cpu.cr3 & ADDR_MASK & ~KPTI_USER_BIT
            if (r, True) not in roots:
                roots.append((r, True))
    for name in ("init_top_pgt", "swapper_pg_dir"):
        if symbols.has_symbol(name):
            roots.append(((symbols.symbol_address(name) - START_KERNEL_MAP + d) & U64 & ADDR_MASK, False))
            break
    # The image's own phys_base variable must agree: an image left by an earlier boot
    # (RAM survives a reset) has a banner and self-consistent page tables too, but a
    # different layout; only the vCPUs' CR3 or this check tell them apart.
    pb_link = symbols.symbol_address("phys_base") if symbols.has_symbol("phys_base") else None
    for levels in _levels_options(source, runs, symbols, None, d):
        for root, by_vcpu in roots:
            if not runs.contains(root, PAGE_SIZE):
                continue
            pt = PageTables(source, root, levels, runs=runs)
            for koff in range(0, KASLR_MAX, KASLR_ALIGN):
                if pt.translate((link + koff) & U64) != banner_pa:
                    continue
                phys_base = (d - koff) & U64
                if pb_link is not None:
                    raw = _read_phys(source, runs, (pb_link - START_KERNEL_MAP + d) & U64, 8)
                    if raw is None or int.from_bytes(raw, "little") != phys_base:
                        break  # koff is unique for a root: try the next root
                yield _Layout(koff, phys_base, levels, root, by_vcpu)
                break


def _kernel_root(symbols: SymbolTable, koff: int, phys_base: int) -> int | None:
    for name in ("init_top_pgt", "swapper_pg_dir"):
        if symbols.has_symbol(name):
            return (symbols.symbol_address(name) + koff - START_KERNEL_MAP + phys_base) & U64 & ADDR_MASK
    return None


def _task_list_walks(prog: Program, limit: int = 256) -> bool:
    """Does init_task.tasks walk back to its head?  (A stale kernel's lists are
    overwritten by the live kernel's allocations.)"""
    try:
        head = prog.symbol_address("init_task") + prog.member_offset("task_struct", "tasks")
        node = prog.read_u64(head)
        for _ in range(limit):
            if node == head:
                return True
            node = prog.read_u64(node)
    except (GuestDataError, SymbolError):
        return False
    return False


def _verify_vmcoreinfo_layout(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, vmci: dict[str, str], koff: int, phys_base: int
) -> bool:
    """Does this ISF fit the guest under the VMCOREINFO layout (banner bytes, swapper_pg_dir)?"""
    if symbols.banner is None or not symbols.has_symbol("linux_banner"):
        return False
    pa = (symbols.symbol_address("linux_banner") + koff - START_KERNEL_MAP + phys_base) & U64
    raw = _read_phys(source, runs, pa, len(symbols.banner) + 1)
    if raw is None or normalize_banner(raw) != symbols.banner:
        return False
    spgd = _vmcoreinfo_int(vmci, "SYMBOL(swapper_pg_dir)", 16)
    for name in ("init_top_pgt", "swapper_pg_dir"):
        if spgd is not None and symbols.has_symbol(name):
            return (symbols.symbol_address(name) + koff) & U64 == spgd
    return True


def open_kernel(
    source: PhysicalSource,
    symbol_dirs: Iterable[str | os.PathLike[str]] = (),
    *,
    isf: str | os.PathLike[str] | None = None,
    use_vmcoreinfo: bool = True,
    include_default_symbols: bool = True,
    use_cache: bool = True,
) -> Program:
    """Identify the guest kernel in `source`, pick its ISF and find its KASLR layout.

    `symbol_dirs` are searched for ISFs besides the repository's symbols/ (unless
    `include_default_symbols` is False); `isf` forces one file.  Raises SymbolError
    (no matching ISF: one line naming the guest banner and how to make an ISF) or
    GuestDataError (the kernel's layout does not verify)."""
    if isf is not None:
        forced = load_isf(isf, use_cache=use_cache)
        candidates: Candidates = [(Path(isf).resolve(), forced.banner)]
        searched: list[Path] = [Path(isf)]
    else:
        candidates = list(isf_banners(symbol_dirs, include_default_symbols, use_cache=use_cache))
        searched = [Path(d) for d in symbol_dirs]
        if include_default_symbols:
            searched.append(repo_symbol_dir() / "linux")
    runs = PhysicalRuns.of(source)
    vmci = source.vmcoreinfo() if use_vmcoreinfo else None
    koff = _vmcoreinfo_int(vmci, "KERNELOFFSET", 16) if vmci else None
    pbase = _vmcoreinfo_int(vmci, "NUMBER(phys_base)") if vmci else None
    # ISFs of the guest's kernel refused for a layout the walkers do not know: said as such,
    # not as "no ISF matches", when no other ISF fits
    refused: list[LayoutError] = []
    if vmci is not None and koff is not None and pbase is not None:
        release = (vmci.get("OSRELEASE") or "").strip() or None
        prog = _open_by_vmcoreinfo(source, runs, candidates, vmci, koff, pbase, release, use_cache, refused)
        if prog is None:
            raise _no_isf_error(source, candidates, searched, release, forced=isf is not None, refused=refused)
        return prog
    return _open_by_banner(
        source, runs, candidates, searched, forced=isf is not None, use_cache=use_cache, refused=refused
    )


def _load_candidate(path: Path, use_cache: bool, only: bool, refused: list[LayoutError]) -> SymbolTable | None:
    """The ISF at `path`, or None (with a warning) when it is broken, or of a layout the
    walkers do not know (kept in `refused`), and others may fit; the one ISF a user named, or
    the only one there is, fails with its own error."""
    try:
        return load_isf(path, use_cache=use_cache)
    except SymbolError as e:
        if only:
            raise
        if isinstance(e, LayoutError):
            refused.append(e)
        log.warning("%s; skipped", e)
        return None


def _open_by_vmcoreinfo(
    source: PhysicalSource,
    runs: PhysicalRuns,
    candidates: Candidates,
    vmci: dict[str, str],
    koff: int,
    pbase: int,
    release: str | None,
    use_cache: bool,
    refused: list[LayoutError],
) -> Program | None:
    """The kernel as VMCOREINFO lays it out, with the first ISF that fits it, or None."""
    for path, banner in candidates:
        if banner is not None and release is not None and banner_release(banner) != release:
            continue
        symbols = _load_candidate(path, use_cache, len(candidates) == 1, refused)
        if symbols is None or not _verify_vmcoreinfo_layout(source, runs, symbols, vmci, koff, pbase):
            continue
        d = (koff + pbase) & U64
        levels = _levels_options(source, runs, symbols, vmci, d)[0]
        root = _kernel_root(symbols, koff, pbase)
        if root is None:
            raise SymbolError(f"{symbols.name} has no init_top_pgt/swapper_pg_dir symbol")
        return Program(
            source,
            symbols,
            kaslr_offset=koff,
            phys_base=pbase,
            pgtable_levels=levels,
            kernel_root=root,
            layout_from="vmcoreinfo",
        )
    return None


def _open_by_banner(
    source: PhysicalSource,
    runs: PhysicalRuns,
    candidates: Candidates,
    searched: list[Path],
    *,
    forced: bool,
    use_cache: bool,
    refused: list[LayoutError],
) -> Program:
    """No VMCOREINFO: the kernel whose banner is in physical memory and whose page tables map
    it there; a layout a vCPU's CR3 confirms wins, then one whose task list is intact."""
    by_banner: dict[bytes, list[Path]] = {}
    for path, banner in candidates:
        if banner is not None:
            by_banner.setdefault(banner, []).append(path)
    tried_match = False
    fallback: list[Program] = []
    for pa, text in scan_banners(source):
        paths = by_banner.get(text)
        if not paths:
            continue
        tried_match = True
        for path in paths:
            symbols = _load_candidate(path, use_cache, forced, refused)
            if symbols is None or not symbols.has_symbol("linux_banner"):
                continue
            for prog, by_vcpu in _programs_at(source, runs, symbols, pa):
                if by_vcpu:
                    return prog  # the vCPUs run this kernel
                fallback.append(prog)
    # No vCPU state confirms a layout: prefer a kernel whose task list is intact.
    for prog in fallback:
        if _task_list_walks(prog):
            return prog
    if fallback:
        return fallback[0]
    if tried_match:
        raise GuestDataError(
            "the guest's kernel banner matches an ISF but no KASLR offset maps it"
            " through the kernel page tables: corrupt or foreign page tables"
        )
    raise _no_isf_error(source, candidates, searched, None, forced=forced, refused=refused)


def _programs_at(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, banner_pa: int
) -> Iterator[tuple[Program, bool]]:
    """A Program for each layout that puts linux_banner at `banner_pa`, and whether a vCPU
    confirmed it."""
    for lay in _layouts_from_banner(source, runs, symbols, banner_pa):
        root = _kernel_root(symbols, lay.kaslr_offset, lay.phys_base) or lay.root
        try:
            prog = Program(
                source,
                symbols,
                kaslr_offset=lay.kaslr_offset,
                phys_base=lay.phys_base,
                pgtable_levels=lay.levels,
                kernel_root=root,
                layout_from="banner scan",
            )
        except GuestDataError:
            continue
        yield prog, lay.by_vcpu


def _no_isf_error(
    source: PhysicalSource,
    candidates: list[tuple[Path, bytes | None]],
    searched: list[Path],
    release: str | None,
    forced: bool,
    refused: list[LayoutError],
) -> SymbolError:
    if refused:
        return refused[0]
    cut_short: list[int] = []
    guest = _guest_banner_for_message(source, release, cut_short)
    if guest is None:
        if cut_short:
            total = sum(run.length for run in source.runs())
            return SymbolError(
                f"no Linux kernel banner in the {banner_scan_bytes() >> 30} GiB of guest memory searched"
                f" (up to guest-physical {cut_short[0]:#x} of {total / (1 << 30):.0f} GiB), and the dump has"
                " no VMCOREINFO to say where the kernel is:"
                f" record it from a guest with QEMU's -device vmcoreinfo, or set {BANNER_SCAN_ENV} to search further"
            )
        return SymbolError(
            "no Linux kernel banner found in guest memory: not a Linux guest, or a"
            " kernel image this tool cannot recognise"
        )
    if forced and candidates:
        path, banner = candidates[0]
        g = banner_text(guest) if isinstance(guest, bytes) else guest
        return SymbolError(
            f"ISF {path.name} is for '{banner_text(banner or b'?')}' but the guest runs"
            f" '{g}': use the ISF made from that kernel's vmlinux"
        )
    return missing_isf_error(guest, searched)
