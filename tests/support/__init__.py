"""What the tests share and no test file owns: fake kernel memory laid out by the real ISFs,
the kdump writer that makes dump variants QEMU does not offer, running the CLI, the corpus
cases, and the one-line-error check. Nothing here is collected as a test."""
