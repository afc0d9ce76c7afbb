"""ds: the kernel's generic data structures, each walk bounded in steps: doubly linked and
hash lists (list), xarrays (xarray), maple trees (maple) and red-black trees (rbtree)."""
