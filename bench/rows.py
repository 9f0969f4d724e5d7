"""The benchmark rows of docs/BENCHMARKS.md: one place that names every case the report covers."""
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class TrainingRow:
    name: str
    B: int
    T: int
    HQ: int
    H: int
    K: int
    V: int
    window: Optional[int] = None
    gate: bool = False
    sink: bool = False
    packed: List[int] = field(default_factory=list)  # lengths; B must be 1

    def pairs(self) -> float:
        """Visible (i, j) pairs summed over sequences (FLOPs = 2 * HQ * pairs * (K + V) forward)."""
        def seq(L):
            if self.window is None:
                return L * (L + 1) / 2
            W = self.window
            full = min(L, W)
            return full * (full + 1) / 2 + max(0, L - W) * W
        if self.packed:
            return sum(seq(L) for L in self.packed)
        return self.B * seq(self.T)

    def fwd_flops(self) -> float:
        return 2.0 * self.HQ * self.pairs() * (self.K + self.V)


def _packed16() -> List[int]:
    # 16 sequences, 16384 tokens, lengths spread 1:8 (fixed so runs compare).
    lens = [256, 2048, 512, 1536, 768, 1280, 1024, 1024, 384, 1664, 640, 1408, 896, 1152, 1792, 2016]
    lens[-1] += 16384 - sum(lens)
    return lens


TRAINING_ROWS = [
    TrainingRow("MHA D64, B2 H32 T8192", 2, 8192, 32, 32, 64, 64),
    TrainingRow("MHA D128, B2 H16 T8192", 2, 8192, 16, 16, 128, 128),
    TrainingRow("MHA D128, B8 H16 T2048", 8, 2048, 16, 16, 128, 128),
    TrainingRow("MHA D256, B2 H8 T8192", 2, 8192, 8, 8, 256, 256),
    TrainingRow("GQA 32/8 D128, B2 T8192", 2, 8192, 32, 8, 128, 128),
    TrainingRow("MHA D128, B1 H16 T16384", 1, 16384, 16, 16, 128, 128),
    TrainingRow("MHA D128, B1 H16 T32768", 1, 32768, 16, 16, 128, 128),
    TrainingRow("MHA D256, B1 H8 T16384", 1, 16384, 8, 8, 256, 256),
    TrainingRow("MHA D256, B1 H8 T32768", 1, 32768, 8, 8, 256, 256),
    TrainingRow("K192 V128, B2 H8 T4096", 2, 4096, 8, 8, 192, 128),
    TrainingRow("K512 V512, B2 H8 T4096", 2, 4096, 8, 8, 512, 512),
    TrainingRow("K576 V512, B2 H8 T4096", 2, 4096, 8, 8, 576, 512),
    TrainingRow("window 1024, GQA 32/8 D128 T8192", 2, 8192, 32, 8, 128, 128, window=1024),
    TrainingRow("log gate, GQA 32/8 D128 T8192", 2, 8192, 32, 8, 128, 128, gate=True),
    TrainingRow("sink, GQA 32/8 D128 T8192", 2, 8192, 32, 8, 128, 128, sink=True),
    TrainingRow("gate + window 1024 + sink", 2, 8192, 32, 8, 128, 128, window=1024, gate=True, sink=True),
    TrainingRow("packed 16 sequences, 16384 tokens, GQA 32/8 D128", 1, 16384, 32, 8, 128, 128,
                packed=_packed16()),
]


@dataclass
class ServingRow:
    name: str
    batch: int
    context: int
    q_len: int = 1          # tokens per sequence (verify: 4)
    HQ: int = 32
    H: int = 8
    D: int = 128
    block_size: int = 16

    def kv_bytes(self, elem_bytes: float, per_token_scales: bool = False) -> float:
        per_tok = self.H * 2 * self.D * elem_bytes + (2 * 4 * self.H if per_token_scales else 0)
        return self.batch * self.context * per_tok


DECODE_ROWS = [
    ServingRow("B64 ctx 4096", 64, 4096),
    ServingRow("B8 ctx 32768", 8, 32768),
    ServingRow("B128 ctx 1024", 128, 1024),
]

PAGED_ROWS = DECODE_ROWS + [
    ServingRow("B1 ctx 131072", 1, 131072),
    ServingRow("verify 3 x 4 tokens, ctx 32768", 3, 32768, q_len=4),
    ServingRow("verify 3 x 4 tokens, ctx 131072", 3, 131072, q_len=4),
]
