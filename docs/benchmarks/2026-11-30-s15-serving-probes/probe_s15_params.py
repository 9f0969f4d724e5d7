# Session 15 probe (run 8): runs 4-6 found that only torch's reduce kernel (even one CTA over 1 KB) leaves the next
# flashgate launch ~8 us slower. Its by-value parameter block is large (the reduction's offset calculators); is
# that it? Decode bf16 B128/1024 on cache A (cuDNN for reference) after (untimed) one CTA of a kernel that does
# nothing but read one word of a by-value parameter block of 64 B, 2 KB, 8 KB or 30 KB (params_kernels.cu,
# built with `nvcc -O2 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a -o libparams.so
# params_kernels.cu`; argv[1] = that library), next to nothing and torch's max over 1 KB. Rounds alternate.
import ctypes, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-11-30-s14-serving-probes"))
import torch
from probe_timing import FLUSH  # noqa: E402
from decode_after import print_after  # noqa: E402

lib = ctypes.CDLL(sys.argv[1])
lib.launch_params.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
out = torch.zeros(16, dtype=torch.int32, device="cuda")


def params(n):
    def launch():
        rc = lib.launch_params(n, out.data_ptr(), torch.cuda.current_stream().cuda_stream)
        assert rc == 0, f"launch_params({n}) returned {rc}"
    return launch


before = {"none": lambda: None, "params64": params(64), "params2k": params(2048), "params8k": params(8192),
          "params30k": params(30000), "max_tiny": lambda: FLUSH[:1024].max()}
print_after(before)
