// The roles both Hopper dK/dV kernels share (sm_90a; backward_kernel.cuh, the narrow one, and
// backward_wide_kernel.cuh): an item's work and the walk over its steps, the producer lane's loads, the term warp's
// row terms, the writer warp's dQ adds, and deterministic mode's turn warp with its counters. Each kernel's buffers
// type begins with StepBarriers and gives the rings (Ring), the stage accessors and the barriers these roles take.
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/anchored_gate.cuh"
#include "cuda/common/backward_params.h"
#include "cuda/common/element.h"
#include "cuda/common/online_softmax.h"
#include "cuda/common/sequence.h"
#include "cuda/common/tile_scheduler.h"
#include "cuda/common/visibility.h"
#include "cuda/hopper/backward.h"
#include "cuda/hopper/dq_staging.cuh"
#include "cuda/hopper/ring.h"
#include "cuda/ptx/tma.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FG_HOPPER_BWD_BODY 1
#else
#define FG_HOPPER_BWD_BODY 0
#endif

namespace flashgate::cuda::hopper {

#if defined(__CUDACC__)
namespace bwd_detail {

// One CTA's work: key tile j0.. of one sequence and kv head, and the query rows that see it, walked as steps of
// (query head of the group, query tile).
struct KeyWork {
  SequenceSpan seq;
  int64_t seq_index = 0;  // the sequence's number (the batch index when dense)
  int64_t hk = 0, order = 0;  // the kv head and the key tile's place in the order (bwd::key_item)
  int j0 = 0, rows_begin = 0, tiles_per_head = 0, steps = 0;
  bool valid = false;
  bool up = false;  // deterministic mode's ascending order (BackwardParams::dq_ascending): StepWalk walks the rows up
};

// The next item (a key tile and kv head, numbered in key_work's order) for a persistent CTA to take: CTAs take them
// as they come free, so the heavy and light tiles even out whatever the order, and an item is only taken once every
// item before it is (deterministic mode's waits go to earlier items only, so none can wait on an item no CTA holds).
__device__ __forceinline__ uint32_t take_item(const bwd::BackwardParams& p) { return atomicAdd(p.next_item, 1u); }
// A warp's read of the item number the producer lane handed over (kv_full): lane 0 reads it for the warp, so that
// the read is ordered before the producer's next write by lane 0's own arrival on kv_empty (KvRing::release).
__device__ __forceinline__ int handed_item(const int* slot) {
  return __shfl_sync(0xffffffffu, threadIdx.x % 32 == 0 ? *static_cast<const volatile int*>(slot) : 0, 0);
}

// The step orders a kernel variant walks (KeyWork::up): the descending one only, either as
// BackwardParams::dq_ascending says, or the ascending one only (w.up known at compile time but in kEither).
enum class Walks { kDown, kEither, kUp };

template <int BN, int BM, Walks kWalks = Walks::kDown>
__device__ __forceinline__ KeyWork key_work(const bwd::BackwardParams& p, const TileSchedule& keys, int64_t item) {
  const AttentionParams& a = p.a;
  KeyWork w;
  const bwd::KeyItem ki = bwd::key_item(p, keys.num_tiles, item);
  w.hk = ki.hk;
  w.order = ki.order;
  // Deterministic mode adds dQ in descending key-tile order (dq_turn) with its tiles lightest first, or in
  // ascending order (dq_turn_ascending) heaviest first: a tile only waits for tiles that come before it, which are
  // done or under way.
  const int64_t order = ki.order;
  w.up = kWalks == Walks::kUp || (kWalks == Walks::kEither && p.dq_ascending);
  const bool lightest_first = p.dq_order && !w.up;
  const TileMapEntry te = key_tile_heaviest_first(keys, lightest_first ? keys.num_tiles - 1 - order : order);
  if (te.seq < 0) return w;
  w.seq = sequence_span(a, te.seq);
  w.seq_index = te.seq;
  w.j0 = te.tile * BN;
  const int key_len = a.key_len(w.seq.len);  // a slice pair's keys (its rows sit key_shift after them)
  if (w.j0 >= key_len) return w;
  w.valid = true;
  const KeySpan rows = rows_seeing_keys(w.j0, w.j0 + BN, w.seq.len, a.window, a.key_shift, key_len);
  // Steps start where walk_begin says (visibility.h); a slice pair's shifted rows may begin inside a 16-row group,
  // whose rows before the first seeing row the step's mask hides.
  w.rows_begin = walk_begin(rows.begin, BN, BM);
  w.tiles_per_head = rows.empty() ? 0 : (rows.end - w.rows_begin + BM - 1) / BM;
  w.steps = static_cast<int>(a.group) * w.tiles_per_head;
  return w;
}

// The Gc that a key tile's gate terms are taken relative to for query head h: a slice pair's (gc_k set) at its anchor
// key (anchored_gate.cuh), 0 for whole sequences (their terms as they were, bit for bit). Rows take Gc_i - anchor
// (exact by Sterbenz's lemma near the tile; where it is rounded, the row's P is decayed by as much), then lse.
template <int BN>
__device__ __forceinline__ float gate_anchor(const AttentionParams& a, const KeyWork& w, int64_t h) {
  if (!a.gc_k) return 0.f;
  return a.gc_key_row(w.seq.batch, h)[w.seq.start + bwd::gate_anchor_key(w.j0, BN, a.key_len(w.seq.len))];
}

// A step: query head and first row.
struct Step {
  int64_t h;
  int i0;
};
// An item's steps in order: each query head's row blocks from the first down; in deterministic mode's ascending
// order (dq_turn_ascending) the row blocks from the last up, every query head of a block in turn. Walked one step at
// a time: the step's number divided by the steps of a head (or of a row block) made a chain of dependent integer
// and conversion instructions at the top of every step, on the consumers' path.
template <int BM>
class StepWalk {
 public:
  __device__ __forceinline__ StepWalk(const bwd::BackwardParams& p, const KeyWork& w) : p_(p), w_(w) {}

  __device__ __forceinline__ Step operator*() const { return at(outer_, inner_); }
  // The step before this one (the walk's first step must not ask).
  __device__ __forceinline__ Step previous() const {
    return inner_ > 0 ? at(outer_, inner_ - 1) : at(outer_ - 1, inner_count() - 1);
  }
  // The step after this one (the walk's last step must not ask).
  __device__ __forceinline__ Step following() const {
    return inner_ + 1 < inner_count() ? at(outer_, inner_ + 1) : at(outer_ + 1, 0);
  }
  // The step is its query head's last (descending order, where a head's row blocks come one after the other).
  __device__ __forceinline__ bool ends_head() const { return !w_.up && inner_ == w_.tiles_per_head - 1; }
  __device__ __forceinline__ void next() {
    if (++inner_ == inner_count()) inner_ = 0, ++outer_;
  }

 private:
  __device__ __forceinline__ int inner_count() const {
    return w_.up ? static_cast<int>(p_.a.group) : w_.tiles_per_head;
  }
  __device__ __forceinline__ Step at(int outer, int inner) const {
    const int head = w_.up ? inner : outer, block = w_.up ? w_.tiles_per_head - 1 - outer : inner;
    return {w_.hk * p_.a.group + head, w_.rows_begin + block * BM};
  }
  const bwd::BackwardParams& p_;
  const KeyWork& w_;  // the walk's position is all it keeps: the rest is the item's, live anyway
  int outer_ = 0, inner_ = 0;
};

// Deterministic mode (p.dq_order): a warp adds its part of a step's dQ rows (and row sums) only once every warp of
// the key tiles after this one that add into the same rows did (8 a tile, dq_turn in all), so that each fp32
// sum is made in one order on every run. Those tiles walk the rows from i0 / BN's tile down to this one; each starts
// at its own first key row, so a later tile reaches any row block sooner than an earlier one and seldom makes it
// wait. The counter of query head h's `rows`-row block at i0:
__device__ __forceinline__ int* dq_turn_counter(const bwd::BackwardParams& p, const KeyWork& w, int64_t h, int i0,
                                                int rows) {
  return p.dq_order + bwd::dq_order_index(p.a, w.seq.batch, h, w.seq_index, w.seq.start, i0, rows);
}
// The adds counted so far as lane 0 reads them (the other lanes get 0; dq_turn_come goes by lane 0's). Read a
// step ahead of the turn, its round trip to L2 hides under the step's MMAs; an acquiring read, so that the turn
// needs no second one once the count is seen.
__device__ __forceinline__ int peek_dq_turns(const int* counter) {
  if (threadIdx.x % 32 != 0) return 0;
  ::cuda::atomic_ref<const int, ::cuda::thread_scope_device> count(*counter);
  return count.load(::cuda::memory_order_acquire);
}
// Whether `turn` adds are counted (one try, by what peek_dq_turns read into `seen`, which it reads again while
// short). Warp-uniform (a divergent loop makes ptxas serialise the kernel's wgmmas). Lane 0's acquiring read and
// the warp barrier order every lane's adds after the counted ones (a fence there cost deterministic mode 7%).
__device__ __forceinline__ bool dq_turn_come(const int* counter, int turn, int& seen) {
  if (__shfl_sync(0xffffffffu, seen, 0) < turn) {
    seen = peek_dq_turns(counter);
    return false;
  }
  __syncwarp();
  return true;
}
// Counts `adds` adds to the dQ rows of `counter` (lane 0, release): the warp barrier orders every lane's adds, and
// every add the warp synchronised with before (the turn warp: the consumer warps' through turn_done), before the
// count; a caller that counts one step late finds them done.
__device__ __forceinline__ void count_dq_adds(int* counter, int adds) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> count(*counter);
    count.fetch_add(adds, ::cuda::memory_order_release);
  }
}

// The adds a key tile at j0 waits for at the dQ rows from i0 (BM rows of a sequence of `len`): `adds` per tile of
// every later tile that walks them.
template <int BN, int BM>
__device__ __forceinline__ int dq_turn(int i0, int j0, int len, int adds) {
  return adds * later_tiles_walking(i0, j0 / BN, len, BN, BM);
}
// The same in ascending order (BackwardParams::dq_ascending): `adds` per tile of every earlier tile whose walk of
// row blocks of BM includes them. Heaviest first, each tile starts after the tiles before it, and walking the rows
// up with the query heads innermost, a tile reaches a row block no sooner after its start than they did (GQA: the
// query heads' steps in between give their counts time).
template <int BN, int BM>
__device__ __forceinline__ int dq_turn_ascending(int i0, int j0, int window, int adds) {
  return adds * (j0 / BN - first_key_tile_walking(i0, window, BN, BM));
}
// The barriers both dK/dV kernels' buffers begin with (the producer's and the term warp's code serves both): kv_full
// and kv_empty (the item's K and V), then per stage q_full and q_empty (Q and dO), t_full and t_empty (the row terms).
template <int kS>
struct StepBarriers {
  static constexpr int kCount = 2 + 4 * kS;
  static constexpr bool kDoApart = false;  // dO on q_full / q_empty with Q (a buffers type may load it apart)
  uint64_t* bars;
  __device__ __forceinline__ uint64_t* kv_full() const { return bars; }
  __device__ __forceinline__ uint64_t* kv_empty() const { return bars + 1; }
  __device__ __forceinline__ uint64_t* q_full(int s) const { return bars + 2 + s; }
  __device__ __forceinline__ uint64_t* q_empty(int s) const { return bars + 2 + kS + s; }
  __device__ __forceinline__ uint64_t* t_full(int s) const { return bars + 2 + 2 * kS + s; }
  __device__ __forceinline__ uint64_t* t_empty(int s) const { return bars + 2 + 3 * kS + s; }
  // A consumer's wait for a step's Q (and dO with it) and row terms in stage s, before it issues the step's first
  // wgmma: not between issue and wait, where a wait loop serialises the wgmmas.
  __device__ __forceinline__ void wait_step(int s, uint32_t parity) const {
    ptx::barrier_wait(q_full(s), parity);
    ptx::barrier_wait(t_full(s), parity);
  }
};

// What an item loads beside its K and V: nothing (ExtraKv, a kernel's own: kBytes, and its loads onto a barrier).
struct NoExtraKv {
  static constexpr uint32_t kBytes = 0;
  __device__ __forceinline__ void operator()(uint64_t*) const {}
};

// The producer's lane: per item with steps, K and V (and `extra`'s loads), then Q and dO of every step (`step` counts
// the CTA's steps), head-dim columns col0.. (a pair's half).
template <class T, class Buf, class ExtraKv = NoExtraKv>
__device__ __forceinline__ void produce(const DkdvParams& p, const Buf& buf, const KeyWork& w, uint32_t item_n,
                                        uint32_t step, int col0 = 0, const ExtraKv& extra = {}) {
  using Tile = typename Buf::Tile;
  const int32_t token0 = static_cast<int32_t>(w.seq.start), batch = static_cast<int32_t>(w.seq.batch);
  const int32_t hk = static_cast<int32_t>(w.hk);
  Buf::KvRing::wait_free(buf.kv_empty(), item_n);  // the consumers are done with the last item's K and V
  ptx::barrier_arrive_expect(buf.kv_full(), Tile::kKBytes + Tile::kVBytes + ExtraKv::kBytes);
  for (int c = 0; c < Tile::kKBlocks; ++c)
    ptx::tma_load(buf.template k<T>() + c * Tile::BN * 64, &p.k_map, {col0 + c * 64, token0 + w.j0, hk, batch},
                  buf.kv_full());
  for (int c = 0; c < Tile::kVBlocks; ++c)
    ptx::tma_load(buf.template v<T>() + c * Tile::BN * 64, &p.v_map, {col0 + c * 64, token0 + w.j0, hk, batch},
                  buf.kv_full());
  extra(buf.kv_full());
  // Step st's dO into stage s, completing on `full`.
  const auto load_dout = [&](const Step& st, int s, uint64_t* full) {
    const int32_t h = static_cast<int32_t>(st.h), row = token0 + st.i0;
    for (int c = 0; c < Tile::kVBlocks; ++c)
      ptx::tma_load(buf.template dout<T>(s) + c * Tile::BM * 64, &p.do_map, {col0 + c * 64, row, h, batch}, full);
  };
  StepWalk<Tile::BM> walk(p.b, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const Step st = *walk;
    const uint32_t n = step + it;
    const int s = buf.stage(n);
    const auto load_q = [&] {
      buf.wait_free(buf.q_empty(s), n);
      ptx::barrier_arrive_expect(buf.q_full(s), Tile::kQBytes + (Buf::kDoApart ? 0 : Tile::kDoBytes));
      const int32_t h = static_cast<int32_t>(st.h), row = token0 + st.i0;
      for (int c = 0; c < Tile::kKBlocks; ++c)
        ptx::tma_load(buf.template q<T>(s) + c * Tile::BM * 64, &p.q_map, {col0 + c * 64, row, h, batch},
                      buf.q_full(s));
      if constexpr (!Buf::kDoApart) load_dout(st, s, buf.q_full(s));
    };
    if constexpr (Buf::kDoApart) {
      const auto load_do = [&] {
        Buf::DoRing::wait_free(buf.do_empty(), n);
        ptx::barrier_arrive_expect(buf.do_full(), Tile::kDoBytes);
        load_dout(st, s, buf.do_full());
      };
      // In the order the stages come free: with one stage of each dO first (its last product is made first); Q
      // first where it has a stage more, so that it loads while the step before is made.
      if constexpr (Buf::kS == 1) load_do(), load_q();
      else load_q(), load_do();
    } else {
      load_q();
    }
  }
}

// A producer warp stages each step's row terms: the row offset r = (lse - Gc) log2 e - log2 factor, so that P =
// factor exp2(s scale log2 e - r - Gc_key log2 e) (Scale: PScale of element.h; +inf where the row takes no
// probability: past the sequence, or a row that sees no key), D / factor, and with kSinkWeights and p.sink_parts the
// sink's share exp(sink - lse) (0 where the row takes none).
template <class Scale, class Buf, bool kSinkWeights = false>
__device__ __forceinline__ void stage_terms(const bwd::BackwardParams& p, const Buf& buf, const KeyWork& w,
                                            uint32_t step) {
  using Tile = typename Buf::Tile;
  constexpr int kRows = Tile::BM / 32;  // rows a lane: lane, lane + 32, ...
  static_assert(Tile::BM % 32 == 0, "a lane's rows");
  const int lane = threadIdx.x % 32;
  StepWalk<Tile::BM> walk(p, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const Step st = *walk;
    const int64_t base = p.row_index(w.seq.batch, st.h, w.seq.start);
    const float* gc = p.a.has_gate ? p.a.gc_row(w.seq.batch, st.h) + w.seq.start : nullptr;
    const float anchor = gc ? gate_anchor<Tile::BN>(p.a, w, st.h) : 0.f;
    const float sink = kSinkWeights && p.sink_parts ? p.a.sink[st.h] : 0.f;
    // The step's terms, loaded before the wait for its stage: their round trips to L2 run under the wait (one after
    // the other, behind it, they held the consumers at their wait for the terms).
    float offset[kRows], d[kRows], weight[kSinkWeights ? kRows : 1];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int i = st.i0 + lane + 32 * k;
      const bool in = i < w.seq.len;
      const float lse = in ? p.lse[base + i] : -INFINITY;
      offset[k] = lse == -INFINITY ? INFINITY : (lse - (gc ? gc[i] - anchor : 0.f)) * kLog2e - Scale::kLog2;
      d[k] = in ? p.D[base + i] * Scale::kInv : 0.f;
      if constexpr (kSinkWeights) weight[k] = lse == -INFINITY ? 0.f : expf(sink - lse);
    }
    const int s = buf.stage(step + it);
    buf.wait_free(buf.t_empty(s), step + it);
    float* dst = buf.terms(s);
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int r = lane + 32 * k;
      dst[r] = offset[k];
      dst[Tile::BM + r] = d[k];
      if constexpr (kSinkWeights)
        if (p.sink_parts) dst[2 * Tile::BM + r] = weight[k];
    }
    ptx::barrier_arrive(buf.t_full(s));
  }
}

// Deterministic mode's turn warp: per step of an item, in the consumers' order, it hands the turn to the writer
// warp (and with the row sums the consumers) (turn_ready) once every other key tile that adds to the step's dQ rows
// before this one counted its adds there (lane 0's acquiring reads), and once they made the step's adds (turn_done)
// counts them for the tiles waiting after this one (release). The adds are ordered after the acquire and before the
// release through the two barriers, so the waits and the round trips to L2 fall on this warp while the consumers go
// on. The next step's counter is read while the step's adds run: where that was enough, the turn costs no round
// trip. kHandEarly: such a turn goes out before the count of the step before, which waits for that step's adds to
// complete, so that the writer's next adds do not wait for it (the wide kernel, whose 48-64 KB adds take long);
// otherwise every count goes first (the narrow kernel: handed early, its sink rows measured 3% slower).
// tile_adds: the count an item makes at a row block (a fixed number a step: kReleasers per CTA); `w` the item's (its
// keys from j0, Tile::kItemKeys of them).
template <bool kHandEarly, class Buf>
__device__ __forceinline__ void take_turns(const bwd::BackwardParams& p, const Buf& buf, const KeyWork& w,
                                           uint32_t step, int tile_adds) {
  using Tile = typename Buf::Tile;
  using Turns = typename Buf::TurnRing;
  const auto counter_of = [&](const Step& st) { return dq_turn_counter(p, w, st.h, st.i0, Tile::BM); };
  StepWalk<Tile::BM> walk(p, w);
  Step st = *walk;
  int* made = nullptr;  // the counter of the step before, whose adds are counted once made
  int* counter = counter_of(st);
  int seen = peek_dq_turns(counter);
  for (int it = 0; it < w.steps; ++it) {
    const uint32_t n = step + it;
    const int turn = w.up ? dq_turn_ascending<Tile::kItemKeys, Tile::BM>(st.i0, w.j0, p.a.window, tile_adds)
                          : dq_turn<Tile::kItemKeys, Tile::BM>(st.i0, w.j0, w.seq.len, tile_adds);
    // An early turn takes a stage that step n - 2's adds freed (counted in the last round).
    bool handed = kHandEarly && made != nullptr && dq_turn_come(counter, turn, seen);
    if (handed && threadIdx.x % 32 == 0) ptx::barrier_arrive(buf.turn_ready(Turns::stage(n)));
    if (made) {
      ptx::barrier_wait(buf.turn_done(Turns::stage(n - 1)), Turns::parity(n - 1));
      count_dq_adds(made, Buf::kReleasers);
    }
    if (!handed) {
      while (!dq_turn_come(counter, turn, seen)) __nanosleep(64);
      if (threadIdx.x % 32 == 0) ptx::barrier_arrive(buf.turn_ready(Turns::stage(n)));
    }
    made = counter;
    if (it + 1 < w.steps) {
      walk.next();
      st = *walk;
      counter = counter_of(st);
      seen = peek_dq_turns(counter);
    }
  }
  const uint32_t last = step + w.steps - 1;
  ptx::barrier_wait(buf.turn_done(Turns::stage(last)), Turns::parity(last));
  count_dq_adds(made, Buf::kReleasers);
}

// The writer warp (both dK/dV kernels): per step of an item, the staged dQ tile's rows in the sequence added into
// dq_acc by one bulk reduction (dq_staging.cuh), or where the slot holds columns col0.. of them (Tile::kDqSlotChunks)
// one a 16-row group; in deterministic mode in the turn the turn warp hands over, complete before the one arrival on
// turn_done (the slot is handed back as soon as it is read). `step` counts the CTA's steps.
template <class Buf>
__device__ __forceinline__ void write_dq(const bwd::BackwardParams& p, const Buf& buf, const KeyWork& w, uint32_t step,
                                         int col0 = 0) {
  using Tile = typename Buf::Tile;
  constexpr int kSlotChunks = Tile::kDqSlotChunks;
  // The slot's chunks a group that are columns of the head dim.
  const int chunks = kSlotChunks ? max(0, min(kSlotChunks, p.K16 / 8 - col0 / 8)) : p.K16 / 8;
  StepWalk<Tile::BM> walk(p, w);
  for (int it = 0; it < w.steps; ++it, walk.next()) {
    const Step st = *walk;
    const uint32_t n = step + it;
    const int t = Buf::TurnRing::stage(n);
    const int groups = max(0, min(Tile::BM, w.seq.len - st.i0) + 15) / 16;
    const int64_t row0 = bwd::dq_row(p.a, w.seq.batch, st.h, w.seq_index, w.seq.start);
    float* dst = p.dq_acc + bwd::dq_acc_offset(row0, st.i0, col0, p.K16);
    if (p.dq_order) ptx::barrier_wait(buf.turn_ready(t), Buf::TurnRing::parity(n));
    ptx::barrier_wait(buf.dq_full(), Buf::DqRing::parity(n));
    if constexpr (kSlotChunks == 0)
      dq_staging::add_run(dst, buf.dq_slot(), static_cast<uint32_t>(groups * chunks) * 512);
    else
      dq_staging::add_groups(dst, int64_t{16} * p.K16, buf.dq_slot(), groups, kSlotChunks * 512u,
                             static_cast<uint32_t>(chunks) * 512);
    Buf::DqRing::release(buf.dq_empty());  // the slot is free once read, the turn is counted once the adds are done
    if (p.dq_order) {
      dq_staging::finish_adds();
      Buf::TurnRing::release(buf.turn_done(t));
    }
  }
}

}  // namespace bwd_detail
#endif  // __CUDACC__

}  // namespace flashgate::cuda::hopper
