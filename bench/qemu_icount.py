#!/usr/bin/env python3
"""Counts the guest instructions a program executed under qemu-user.

Reads the log of `qemu-aarch64 -d in_asm,exec,nochain -D LOG ...` (a file or
a FIFO): each translated block is logged once with its instructions (an
"IN:" section, one line per instruction), and each execution of a block is
one "Trace" line naming the block's guest address (`nochain` makes qemu
return to its loop between blocks, so that every execution is logged). The
count is the sum, over the executions, of the executed block's size.

Prints: instructions, block executions. Blocks that end early (a fault, a
syscall in the middle) are counted whole; qemu ends a block at a syscall,
so that error is a few instructions per syscall.
"""
import sys


def count(stream):
    size = {}          # block address (16 hex digits, as bytes) -> instructions
    total = 0
    executions = 0
    block = None       # address of the block being read, inside an IN: section
    n = 0
    for line in stream:
        if line.startswith(b"Trace"):
            # Trace 0: 0x7f... [00000000/0000005500012340/00000000/ff000000] name
            i = line.index(b"/") + 1
            total += size.get(line[i:line.index(b"/", i)], 0)
            executions += 1
        elif line.startswith(b"0x"):
            if block is None:
                block = line[2:line.index(b":")].rjust(16, b"0")
                n = 0
            n += 1
        elif line.startswith(b"IN:"):
            block = None
        elif block is not None and not line.strip():
            size[block] = n  # a block translated again (after a flush) replaces its entry
            block = None
    return total, executions


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: qemu_icount.py QEMU_LOG")
    with open(sys.argv[1], "rb", buffering=1 << 20) as f:
        total, executions = count(f)
    print(total, executions)
