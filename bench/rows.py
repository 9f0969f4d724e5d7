"""The benchmark rows, parsed from bench/rows.txt (the one list; `flashgate bench` embeds the same file)."""
import argparse
import os
import shlex
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
    packed: List[int] = field(default_factory=list)  # lengths; batch 1

    def pairs(self) -> float:
        """Visible (i, j) pairs summed over sequences (FLOPs = 2 * HQ * pairs * (K + V) forward)."""
        def seq(L):
            if self.window is None:
                return L * (L + 1) / 2
            W = min(self.window, L)
            return W * (W + 1) / 2 + (L - W) * W
        return sum(seq(L) for L in self.packed) if self.packed else self.B * seq(self.T)

    def fwd_flops(self) -> float:
        return 2.0 * self.HQ * self.pairs() * (self.K + self.V)


@dataclass
class ServingRow:
    name: str
    batch: int
    context: int
    q_len: int = 1
    HQ: int = 32
    H: int = 8
    D: int = 128
    block_size: int = 16

    def kv_bytes(self, elem_bytes: float, per_token_scales: bool = False) -> float:
        per_tok = self.H * 2 * self.D * elem_bytes + (2 * 4 * self.H if per_token_scales else 0)
        return self.batch * self.context * per_tok


def _flags(text):
    p = argparse.ArgumentParser(add_help=False)
    for name in ("--batch", "--seqlen", "--heads", "--kv-heads", "--head-dim", "--v-dim", "--window",
                 "--q-len", "--block-size"):
        p.add_argument(name, type=int)
    p.add_argument("--op", default="forward")
    p.add_argument("--packed", default="")
    p.add_argument("--gate", action="store_true")
    p.add_argument("--sink", action="store_true")
    return p.parse_args(shlex.split(text))


def _load():
    training, decode, paged = [], [], []
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rows.txt")) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            section, name, flags = (s.strip() for s in line.split("|"))
            a = _flags(flags)
            if section == "training":
                packed = [int(x) for x in a.packed.split(",")] if a.packed else []
                training.append(TrainingRow(name, a.batch or 1, a.seqlen or sum(packed), a.heads, a.kv_heads,
                                            a.head_dim, a.v_dim or a.head_dim, a.window, a.gate, a.sink, packed))
            else:
                row = ServingRow(name, a.batch, a.seqlen, a.q_len or 1, a.heads, a.kv_heads, a.head_dim,
                                 a.block_size or 16)
                (decode if section == "decode" else paged).append(row)
    return training, decode, paged


TRAINING_ROWS, DECODE_ROWS, PAGED_ROWS = _load()
