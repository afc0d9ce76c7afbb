"""The mutation fuzzer of issue 14: real recorded dumps, mutated as a hostile guest, a broken
file or a careless user would have them, each case run in a forked child and classified.

Families: `containers` (the dump file's own headers, notes, bitmaps and page tables of
contents), `structures` (kernel objects of the dumped tree, found through the library),
`isf` (the symbol table), `paths` (what `-D` names on the host) and `signals` (SIGINT,
SIGTERM and SIGKILL at a random moment of a dump). `python -m fuzz --help` runs them."""
