#!/usr/bin/env python3
"""Where a kernel's weight loads sit between its math, from its SASS.

A weight-streaming kernel is fast only when a warp's loads are in flight together; the compilers
may move each load down to its first use (docs/performance.md, issue 12, session 21: every WNA16 /
FP4 decode kernel issued one step's load, waited, did that step's mmas, and so on). This prints
each kernel whose mangled name matches PATTERN as one line of symbols in program order:

  L  a 128-bit global load (LDG.*.128), the weight loads of these kernels
  A  an asynchronous copy to shared memory (LDGSTS)
  m  a tensor-core mma (HMMA / HGMMA; a run of n is written mN)
  |  a barrier (BAR.SYNC)

e.g. `LLLLLLLLm64` is a round of 8 loads and then its 64 mmas; `Lm8Lm8Lm8` is one load a step.

Usage:
  cuobjdump -sass build/CMakeFiles/mg_ops.dir/ops/moe/cuda/wna16/wna16_decode_bf16.cu.o \\
      | tools/sass_schedule.py 'wna16_decode_up_kernel'

cuobjdump is part of the CUDA toolkit's full install (the Debian nvcc packages lack it); NVIDIA
also ships it, with the nvdisasm it calls, as the PyPI wheels nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm (put both binaries on PATH).
"""
import re
import sys


def symbols(instructions):
    out = []
    for ins in instructions:
        if "LDGSTS" in ins:
            out.append("A")
        elif ins.split()[0].startswith("LDG") or " LDG" in ins:
            if ".128" in ins:
                out.append("L")
        elif "HMMA" in ins or "HGMMA" in ins:
            out.append("m")
        elif "BAR.SYNC" in ins:
            out.append("|")
    return re.sub(r"m{2,}", lambda run: "m%d" % len(run.group(0)), "".join(out))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cuobjdump -sass OBJECT | tools/sass_schedule.py PATTERN")
    pattern = re.compile(sys.argv[1])
    name, body, found = None, [], 0

    def flush():
        nonlocal found
        if name is not None and pattern.search(name):
            found += 1
            print(f"{name}: {len(body)} instructions")
            print("  " + symbols(body))

    for line in sys.stdin:
        if "Function :" in line:
            flush()
            name, body = line.split("Function :", 1)[1].strip(), []
            continue
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(.*?);", line)
        if m and name is not None:
            body.append(m.group(1))
    flush()
    if found == 0:
        sys.exit(f"no kernel matches {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
