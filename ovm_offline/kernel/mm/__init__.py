"""mm: memory of a process and of files: ``struct mm_struct`` and its VMAs, struct page
arithmetic and page-cache lookups (mmap), file contents and ELF build-ids from the page
cache (pagecache), and shmem inodes with their pages (shmem)."""
