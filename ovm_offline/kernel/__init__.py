"""The kernel layer: what the guest kernel's structures mean.

Built on a `PhysicalSource` (guest-physical bytes, vCPU registers, VMCOREINFO):

* symbols.py  - ISF symbol tables: finding one by banner, loading, the on-disk cache
* ktypes.py   - C types from the ISF (structs, pointers, arrays, enums, bit-fields)
* paging.py   - x86-64 4/5-level page tables: translation and bulk range walks
* memory.py   - `Program`: kernel virtual memory with KASLR, typed access; `open_kernel`
* objects.py  - `Struct`, `Pointer`, `Array` views of guest memory
* list.py, tasks.py, pid.py, nsproxy.py, cgroup.py - helpers named after kernel concepts,
  in the style of drgn's helpers

Bad guest data raises GuestDataError, a missing or wrong ISF SymbolError, an
unreadable source SourceError; each with a one-line message.
"""

from .core.identify import open_kernel
from .core.memory import FaultError, Program
from .core.symbols import SymbolTable, load_isf

__all__ = ["FaultError", "Program", "SymbolTable", "load_isf", "open_kernel"]
