"""core: reading the guest kernel at all. ISF symbol tables (symbols), C types (ktypes),
typed views of guest memory (objects: Object, Pointer, Struct), kernel virtual memory with
KASLR (memory: Program, open_kernel) and x86-64 page tables (paging). Every other area
builds on these and nothing here imports another area."""
