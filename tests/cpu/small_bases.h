// Small valid cases of every op, the starting points of the argument-rule, backend and edge tests.
// Values are fresh draws from `seed`; shapes are fixed so that rule tables can name exact sizes.
#pragma once

#include <cstdint>

#include "api_subject.h"

namespace fgtest {

// B=2 T=5 HQ=4 H=2 K=8 V=6, fp32, gate and sink: every optional input present.
inline flashgate::harness::AttentionConfig dense_config() {
  flashgate::harness::AttentionConfig cfg;
  cfg.batch = 2, cfg.seqlen = 5, cfg.heads = 4, cfg.kv_heads = 2, cfg.head_dim = 8, cfg.v_dim = 6;
  cfg.dtype = DType::f32;
  cfg.gate = cfg.sink = true;
  return cfg;
}

// The same heads and dims, packed lengths {2,0,3}: cu_seqlens = [0,2,2,5], T=5.
inline flashgate::harness::AttentionConfig packed_config() {
  flashgate::harness::AttentionConfig cfg = dense_config();
  cfg.packed = {2, 0, 3};
  return cfg;
}

// Lengths {3,0,4}: cu_seqlens [0,3,3,7], N=3, T=7; HQ=4 H=2 K=8 V=6, fp32, gate and sink.
inline flashgate::harness::DecodeConfig decode_config() {
  flashgate::harness::DecodeConfig cfg;
  cfg.seqlens = {3, 0, 4};
  cfg.heads = 4, cfg.kv_heads = 2, cfg.head_dim = 8, cfg.v_dim = 6;
  cfg.dtype = DType::f32;
  cfg.gate = cfg.sink = true;
  return cfg;
}

// Contexts {5,20,0} with queries {1,3,0}: block_size 16, max_blocks 2 (capacity 32 tokens), 3 used + 3 spare
// blocks (num_blocks 6); HQ=4 H=2 K=V=8, fp32, sink. Unused table entries hold -1.
inline flashgate::harness::PagedConfig paged_config() {
  flashgate::harness::PagedConfig cfg;
  cfg.context_lens = {5, 20, 0};
  cfg.query_lens = {1, 3, 0};
  cfg.heads = 4, cfg.kv_heads = 2, cfg.head_dim = 8, cfg.v_dim = 8;
  cfg.block_size = 16;
  cfg.spare_blocks = 3;
  cfg.dtype = DType::f32;
  cfg.sink = true;
  return cfg;
}

template <class Args>
Subject<Args> attention_subject(const flashgate::harness::AttentionCase& c, uint64_t seed);
template <>
inline Subject<ForwardArgs> attention_subject(const flashgate::harness::AttentionCase& c, uint64_t seed) {
  return forward_subject(c, seed);
}
template <>
inline Subject<BackwardArgs> attention_subject(const flashgate::harness::AttentionCase& c, uint64_t seed) {
  return backward_subject(c, seed);
}

// A case of `cfg` as the subject of op `Args` (forward or backward).
template <class Args>
Subject<Args> attention_of(const flashgate::harness::AttentionConfig& cfg, uint64_t seed) {
  Rng rng(seed);
  return attention_subject<Args>(flashgate::harness::AttentionCase::random(cfg, rng), seed);
}
inline Subject<DecodeArgs> decode_of(const flashgate::harness::DecodeConfig& cfg, uint64_t seed) {
  Rng rng(seed);
  return decode_subject(flashgate::harness::DecodeCase::random(cfg, rng), seed);
}
inline Subject<PagedArgs> paged_of(const flashgate::harness::PagedConfig& cfg, uint64_t seed) {
  Rng rng(seed);
  return paged_subject(flashgate::harness::PagedCase::random(cfg, rng), seed);
}

template <class Args>
Subject<Args> dense_base(uint64_t seed) {
  return attention_of<Args>(dense_config(), seed);
}
template <class Args>
Subject<Args> packed_base(uint64_t seed) {
  return attention_of<Args>(packed_config(), seed);
}
template <class Args>
Subject<Args> dense_f64_base(uint64_t seed) {
  flashgate::harness::AttentionConfig cfg = dense_config();
  cfg.dtype = DType::f64;
  return attention_of<Args>(cfg, seed);
}
inline Subject<DecodeArgs> decode_base(uint64_t seed) { return decode_of(decode_config(), seed); }
inline Subject<DecodeArgs> decode_f64_base(uint64_t seed) {
  flashgate::harness::DecodeConfig cfg = decode_config();
  cfg.dtype = DType::f64;
  return decode_of(cfg, seed);
}
inline Subject<PagedArgs> paged_base(uint64_t seed) { return paged_of(paged_config(), seed); }
inline Subject<PagedArgs> paged_fp8_per_token_base(uint64_t seed) {
  flashgate::harness::PagedConfig cfg = paged_config();
  cfg.fp8 = true;
  cfg.scale_mode = flashgate::detail::ScaleMode::per_token;
  return paged_of(cfg, seed);
}
inline Subject<PagedArgs> paged_f64_base(uint64_t seed) {
  flashgate::harness::PagedConfig cfg = paged_config();
  cfg.dtype = DType::f64;
  return paged_of(cfg, seed);
}

// The standard base of each op (for tests that run the same thing over all four).
template <class Args>
Subject<Args> standard_base(uint64_t seed);
template <>
inline Subject<ForwardArgs> standard_base(uint64_t seed) { return dense_base<ForwardArgs>(seed); }
template <>
inline Subject<BackwardArgs> standard_base(uint64_t seed) { return dense_base<BackwardArgs>(seed); }
template <>
inline Subject<DecodeArgs> standard_base(uint64_t seed) { return decode_base(seed); }
template <>
inline Subject<PagedArgs> standard_base(uint64_t seed) { return paged_base(seed); }

}  // namespace fgtest
