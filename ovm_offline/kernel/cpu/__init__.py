"""cpu: register state of a task: the user registers saved on its kernel stack (regs:
``struct pt_regs``, TLS descriptors, CPU features) and its FPU/SSE/AVX state (fpu:
``struct fpu``, XSAVE areas)."""
