"""Family `isf`: the guest kernel's symbol table (Volatility 3 ISF) with types, members, base
types, symbols or enums rewritten, as a wrong or hand-edited ISF has them; and, rarely, the
file itself truncated or corrupted. The ISF is parsed once; each case mutates its own copy
(the forked child's) and is loaded through the same checks a file is."""

from __future__ import annotations

import copy
import random
from pathlib import Path

from ovm_offline import inventory, sources
from ovm_offline.kernel.core import identify
from ovm_offline.kernel.core import symbols as symbols_module
from ovm_offline.kernel.core.isf_cache import DictReader
from ovm_offline.kernel.core.symbols import SymbolTable

from .harness import Mutation
from .targets import ps_and_dump

#: the types a dump reads most (mutations of others rarely matter)
HOT_TYPES = (
    "task_struct",
    "mm_struct",
    "vm_area_struct",
    "file",
    "dentry",
    "qstr",
    "inode",
    "path",
    "fdtable",
    "files_struct",
    "list_head",
    "hlist_node",
    "maple_tree",
    "maple_node",
    "maple_range_64",
    "maple_arange_64",
    "pid",
    "upid",
    "signal_struct",
    "sighand_struct",
    "cred",
    "fs_struct",
    "nsproxy",
    "pt_regs",
    "thread_struct",
    "fpu",
    "pipe_inode_info",
    "pipe_buffer",
    "mount",
    "vfsmount",
    "sigpending",
    "k_sigaction",
    "kernel_cap_struct",
)


class Isf:
    family = "isf"
    # each child shares (and copies, page by page, as Python touches it) the ISF this parent
    # parsed: its growth is the harness's. A user's first run parses the ISF once (260 MiB
    # peak for 6.12, docs/fuzzing.md); later runs read the cache.
    judges_memory = False

    def __init__(self, rec, work: Path) -> None:
        self.pid = rec.manifest["root_pid"]
        self.path = rec.elf
        self.out = work / "images"
        self.work = work
        with sources.open_source(self.path) as source:
            self.isf_path = Path(inventory.open_kernel(source).symbols.path)
        self.isf = symbols_module._parse_isf(self.isf_path)
        self.hot = [t for t in HOT_TYPES if t in self.isf["user_types"]]
        self.table: SymbolTable | None = None

    def _load(self, isf: dict) -> SymbolTable:
        symbols_module._check_isf_types(isf, self.isf_path)  # what loading a file checks
        return SymbolTable(DictReader(isf), self.isf_path)

    def operation(self) -> str:
        table = self.table or self._load(self.isf)
        identify.load_isf = lambda path, **kw: table  # the mutated table stands for the file
        with sources.open_source(self.path) as source:
            return ps_and_dump(source, self.pid, self.out, inventory.open_kernel(source, isf=self.isf_path))

    def mutation(self, rng: random.Random) -> Mutation:
        if rng.random() < 0.01:
            return self._file_mutation(rng)
        isf = self.isf
        kind = rng.random()
        if kind < 0.6:
            name = rng.choice(self.hot)
            user = isf["user_types"][name]
            fields = list(user.get("fields", {}))
            how = rng.randrange(6)
            if how == 0 and fields:
                member = rng.choice(fields)
                new = rng.choice([user["size"] + rng.randrange(1, 4096), -8, -1])
                return self._edit(
                    f"{name}.{member} offset {new}", True, ("user_types", name, "fields", member, "offset"), new
                )
            if how == 1 and fields:
                member = rng.choice(fields)
                new = rng.randrange(0, user["size"] + 1)
                return self._edit(
                    f"{name}.{member} offset {new} (inside)",
                    False,
                    ("user_types", name, "fields", member, "offset"),
                    new,
                )
            if how == 2:
                new = rng.choice([0, -1, 1, 1 << 40])
                return self._edit(f"{name} size {new}", new != user["size"], ("user_types", name, "size"), new)
            if how == 3 and fields:
                member = rng.choice(fields)
                return self._edit(f"{name}.{member} removed", True, ("user_types", name, "fields", member), None)
            if how == 4 and fields:
                member = rng.choice(fields)
                new = rng.choice(
                    [
                        {"kind": "base", "name": "int"},
                        {"kind": "pointer", "subtype": {"kind": "base", "name": "void"}},
                        {"kind": "struct", "name": "no_such_type"},
                        {"kind": "array", "count": 1 << 40, "subtype": {"kind": "base", "name": "char"}},
                    ]
                )
                return self._edit(
                    f"{name}.{member} type {new}", False, ("user_types", name, "fields", member, "type"), new
                )
            return self._edit(f"{name} removed", True, ("user_types", name), None)
        if kind < 0.75:
            name = rng.choice(sorted(isf.get("base_types", {})))
            new = rng.choice([0, 3, 5, 16, 1 << 20, -4])
            return self._edit(f"base type {name} size {new}", True, ("base_types", name, "size"), new)
        if kind < 0.9:
            name = rng.choice(
                [
                    "init_task",
                    "linux_banner",
                    "init_pid_ns",
                    "swapper_pg_dir",
                    "nr_cpu_ids",
                    "__per_cpu_offset",
                    "pcpu_hot",
                    "current_task",
                    "jiffies",
                    "tk_core",
                    "init_mm",
                    "shm_mnt",
                    "pipefifo_fops",
                ]
            )
            if name not in isf["symbols"]:
                name = "init_task"
            if rng.random() < 0.5:
                return self._edit(f"symbol {name} removed", True, ("symbols", name), None)
            delta = rng.choice([1, 8, 4096, -4096, 1 << 21])
            new = (isf["symbols"][name]["address"] + delta) & ((1 << 64) - 1)
            return self._edit(f"symbol {name} moved by {delta}", False, ("symbols", name, "address"), new)
        enums = sorted(isf.get("enums", {}))
        name = rng.choice(enums)
        constants = sorted(isf["enums"][name].get("constants", {}))
        if not constants:
            return self._edit(f"enum {name} removed", True, ("enums", name), None)
        constant = rng.choice(constants)
        return self._edit(f"enum {name}.{constant} = -1", False, ("enums", name, "constants", constant), -1)

    def _edit(self, what: str, structural: bool, keys: tuple, value) -> Mutation:
        def apply() -> None:
            isf = self.isf  # the child's own copy after fork
            node = isf
            for key in keys[:-1]:
                node = node[key]
            if value is None:
                node.pop(keys[-1], None)
            else:
                node[keys[-1]] = copy.deepcopy(value)
            self.table = self._load(isf)

        return Mutation(self.family, what, structural, apply)

    def _file_mutation(self, rng: random.Random) -> Mutation:
        raw = self.isf_path.read_bytes()
        cut = rng.randrange(len(raw))
        data = raw[:cut] if rng.random() < 0.5 else raw[:cut] + bytes([raw[cut] ^ 0xFF]) + raw[cut + 1 :]
        broken = self.work / self.isf_path.name

        def apply() -> None:
            broken.write_bytes(data)
            try:
                symbols_module.load_isf(broken, use_cache=False)
            finally:
                broken.unlink()
            raise AssertionError("a broken ISF file was loaded")  # lzma's check makes this unreachable

        return Mutation(self.family, f"ISF file {'truncated' if len(data) == cut else 'flipped'} at {cut}", True, apply)

    def after_case(self) -> None:
        self.table = None


__all__ = ["Isf"]
