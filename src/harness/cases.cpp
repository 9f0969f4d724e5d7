#include "harness/cases.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <sstream>

#include "common/host_dtype.h"
#include "cpu/parallel.h"
#include "flashgate/error.h"

namespace flashgate::harness {
namespace {

OwnedTensor moved(const OwnedTensor& t, Device d) { return t.defined() ? t.to(d) : OwnedTensor(); }
void poison_if(OwnedTensor& t) {
  if (t.defined()) t.poison();
}

// "a,b,c"; a long list (65536 packed sequences) as its first and last entries with its count and sum, so that
// a case's description stays one readable line.
std::string join(const std::vector<int64_t>& v) {
  constexpr size_t kHead = 6, kTail = 2;
  std::string s;
  if (v.size() <= 2 * (kHead + kTail)) {
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  }
  for (size_t i = 0; i < kHead; ++i) s += std::to_string(v[i]) + ",";
  s += "...";
  for (size_t i = v.size() - kTail; i < v.size(); ++i) s += "," + std::to_string(v[i]);
  return s + " (" + std::to_string(v.size()) + " entries, sum " +
         std::to_string(std::accumulate(v.begin(), v.end(), int64_t{0})) + ")";
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), cu.begin() + 1);
  return cu;
}

// Visible pairs of one causal sequence of length L under window W (none: W < 0).
double seq_pairs(int64_t L, std::optional<int64_t> window) {
  double pairs = 0;
  for (int64_t i = 0; i < L; ++i) pairs += window ? static_cast<double>(std::min<int64_t>(i + 1, *window)) : i + 1.0;
  return pairs;
}

// Bytes of an OwnedTensor of `dtype` and `shape` with `row_pad` elements after every last-axis row.
double tensor_bytes(DType dtype, std::initializer_list<double> shape, int64_t row_pad = 0) {
  double n = 1;
  size_t a = 0;
  for (double d : shape) n *= ++a == shape.size() ? d + static_cast<double>(row_pad) : d;
  return n * static_cast<double>(dtype_size(dtype));
}

// The dtype of the fp32 companions (lse, g, sink, scales): float64 in the fp64 reference mode.
DType companion_of(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

// The training path keeps o's rounding residual for fp16 / bf16 outputs (ForwardArgs::o_residual).
bool keeps_residual(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

}  // namespace

OwnedTensor as_f64(const OwnedTensor& t) {
  if (!t.defined()) return OwnedTensor();
  const Tensor& v = t.view();
  const bool floating = v.dtype == DType::f16 || v.dtype == DType::bf16 || v.dtype == DType::f32;
  if (!floating) return t.to(Device::cpu);
  OwnedTensor out(DType::f64, std::vector<int64_t>(v.shape, v.shape + v.rank));
  out.set_values(t.values());
  return out;
}

std::vector<int64_t> parse_lengths(const std::string& text, const char* what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw Error(ErrorKind::invalid_argument, what,
                  std::string("flashgate: ") + what + ": expected comma-separated lengths >= 0, got '" + text + "'");
    }
  }
  if (out.empty())
    throw Error(ErrorKind::invalid_argument, what, std::string("flashgate: ") + what + ": no lengths given");
  return out;
}

// ---- attention --------------------------------------------------------------------------------------------

int64_t AttentionConfig::T() const {
  return packed.empty() ? seqlen : std::accumulate(packed.begin(), packed.end(), int64_t{0});
}

double AttentionConfig::pairs() const {
  if (!packed.empty()) {
    double p = 0;
    for (int64_t L : packed) p += seq_pairs(L, window);
    return p;
  }
  return batch * seq_pairs(seqlen, window);
}

double AttentionConfig::host_bytes() const {
  const double B = static_cast<double>(this->B()), T = static_cast<double>(this->T()), HQ = static_cast<double>(heads),
               H = static_cast<double>(kv_heads), K = static_cast<double>(head_dim), V = static_cast<double>(v_dim);
  const DType f = companion_of(dtype);
  // q, dq; k, dk; v, dv; dout, o (each pair the same shape); lse; g, dg; sink, dsink; cu_seqlens.
  double bytes = 2 * (tensor_bytes(dtype, {B, T, HQ, K}, row_pad) + tensor_bytes(dtype, {B, T, H, K}, row_pad) +
                      tensor_bytes(dtype, {B, T, H, V}, row_pad) + tensor_bytes(dtype, {B, T, HQ, V}, row_pad));
  bytes += tensor_bytes(f, {B, T, HQ});
  if (residual && keeps_residual(dtype)) bytes += tensor_bytes(DType::i8, {B, T, HQ, V}, row_pad);
  if (gate) bytes += 2 * tensor_bytes(f, {B, T, HQ});
  if (sink) bytes += 2 * tensor_bytes(f, {HQ});
  if (!packed.empty()) bytes += tensor_bytes(DType::i32, {static_cast<double>(packed.size()) + 1});
  return bytes;
}

std::string AttentionConfig::describe() const {
  std::ostringstream s;
  if (packed.empty()) s << "B" << batch << " T" << seqlen;
  else s << "packed[" << join(packed) << "]";
  s << " HQ" << heads << " H" << kv_heads << " K" << head_dim << " V" << v_dim << " " << dtype_name(dtype);
  if (gate) s << " gate";
  if (sink) s << " sink";
  if (window) s << " window" << *window;
  if (scale) s << " scale" << *scale;
  if (row_pad) s << " strided";
  if (deterministic) s << " deterministic";
  if (!residual && keeps_residual(dtype)) s << " no-residual";
  return s.str();
}

AttentionCase AttentionCase::random(const AttentionConfig& cfg, Rng& rng) {
  AttentionCase c;
  c.cfg = cfg;
  const int64_t B = cfg.B(), T = cfg.T(), HQ = cfg.heads, H = cfg.kv_heads, K = cfg.head_dim, V = cfg.v_dim;
  const int64_t pad = cfg.row_pad;
  c.q = OwnedTensor(cfg.dtype, {B, T, HQ, K}, Device::cpu, pad);
  c.k = OwnedTensor(cfg.dtype, {B, T, H, K}, Device::cpu, pad);
  c.v = OwnedTensor(cfg.dtype, {B, T, H, V}, Device::cpu, pad);
  c.dout = OwnedTensor(cfg.dtype, {B, T, HQ, V}, Device::cpu, pad);
  for (OwnedTensor* t : {&c.q, &c.k, &c.v, &c.dout}) t->fill_normal(rng);
  const DType fdt = cfg.dtype == DType::f64 ? DType::f64 : DType::f32;
  if (cfg.gate) {
    c.g = OwnedTensor(fdt, {B, T, HQ});
    c.g.fill_log_sigmoid_normal(rng);
    c.dg = OwnedTensor(fdt, {B, T, HQ});
  }
  if (cfg.sink) {
    c.sink = OwnedTensor(fdt, {HQ});
    c.sink.fill_normal(rng);
    c.dsink = OwnedTensor(fdt, {HQ});
  }
  if (!cfg.packed.empty()) {
    c.cu_seqlens = OwnedTensor(DType::i32, {static_cast<int64_t>(cfg.packed.size()) + 1});
    c.cu_seqlens.fill_index(offsets_of(cfg.packed));
  }
  c.o = OwnedTensor(cfg.dtype, {B, T, HQ, V}, Device::cpu, pad);
  c.lse = OwnedTensor(fdt, {B, T, HQ});
  if (cfg.residual && keeps_residual(cfg.dtype)) c.o_residual = OwnedTensor(DType::i8, {B, T, HQ, V}, Device::cpu, pad);
  c.dq = OwnedTensor(cfg.dtype, {B, T, HQ, K}, Device::cpu, pad);
  c.dk = OwnedTensor(cfg.dtype, {B, T, H, K}, Device::cpu, pad);
  c.dv = OwnedTensor(cfg.dtype, {B, T, H, V}, Device::cpu, pad);
  c.poison_outputs();
  return c;
}

AttentionCase AttentionCase::to(Device d) const {
  AttentionCase c;
  c.cfg = cfg;
  c.q = moved(q, d), c.k = moved(k, d), c.v = moved(v, d), c.g = moved(g, d), c.sink = moved(sink, d);
  c.cu_seqlens = moved(cu_seqlens, d), c.o = moved(o, d), c.lse = moved(lse, d), c.dout = moved(dout, d);
  c.o_residual = moved(o_residual, d);
  c.dq = moved(dq, d), c.dk = moved(dk, d), c.dv = moved(dv, d), c.dg = moved(dg, d), c.dsink = moved(dsink, d);
  return c;
}

AttentionCase AttentionCase::to_f64() const {
  AttentionCase c;
  c.cfg = cfg;
  c.cfg.dtype = DType::f64;
  c.cfg.row_pad = 0;
  c.q = as_f64(q), c.k = as_f64(k), c.v = as_f64(v), c.g = as_f64(g), c.sink = as_f64(sink);
  c.cu_seqlens = as_f64(cu_seqlens), c.o = as_f64(o), c.lse = as_f64(lse), c.dout = as_f64(dout);
  c.dq = as_f64(dq), c.dk = as_f64(dk), c.dv = as_f64(dv), c.dg = as_f64(dg), c.dsink = as_f64(dsink);
  return c;
}

void AttentionCase::poison_outputs() {
  for (OwnedTensor* t : {&o, &lse, &o_residual, &dq, &dk, &dv, &dg, &dsink}) poison_if(*t);
}

ForwardArgs AttentionCase::forward_args() const {
  ForwardArgs a;
  a.q = q.view(), a.k = k.view(), a.v = v.view(), a.o = o.view(), a.lse = lse.view(), a.o_residual = o_residual.view();
  a.g = g.view(), a.sink = sink.view(), a.cu_seqlens = cu_seqlens.view();
  a.scale = cfg.scale;
  a.window = cfg.window;
  return a;
}

BackwardArgs AttentionCase::backward_args() const {
  BackwardArgs a;
  a.q = q.view(), a.k = k.view(), a.v = v.view(), a.o = o.view(), a.lse = lse.view(), a.dout = dout.view();
  a.o_residual = o_residual.view();
  a.g = g.view(), a.sink = sink.view(), a.cu_seqlens = cu_seqlens.view();
  a.dq = dq.view(), a.dk = dk.view(), a.dv = dv.view(), a.dg = dg.view(), a.dsink = dsink.view();
  a.scale = cfg.scale;
  a.window = cfg.window;
  a.deterministic = cfg.deterministic;
  return a;
}

// ---- decode ---------------------------------------------------------------------------------------------

int64_t DecodeConfig::total() const { return std::accumulate(seqlens.begin(), seqlens.end(), int64_t{0}); }

double DecodeConfig::host_bytes() const {
  const double N = static_cast<double>(seqlens.size()), T = static_cast<double>(total()),
               HQ = static_cast<double>(heads), H = static_cast<double>(kv_heads), K = static_cast<double>(head_dim),
               V = static_cast<double>(v_dim);
  const DType f = companion_of(dtype);
  double bytes = tensor_bytes(dtype, {N, HQ, K}, row_pad ? row_pad : q_row_pad) +
                 tensor_bytes(dtype, {T, H, K}, row_pad) + tensor_bytes(dtype, {T, H, V}, row_pad) +
                 tensor_bytes(DType::i32, {N + 1}) + tensor_bytes(dtype, {N, HQ, V}, row_pad);
  if (gate) bytes += tensor_bytes(f, {T, HQ});
  if (sink) bytes += tensor_bytes(f, {HQ});
  return bytes;
}

std::string DecodeConfig::describe() const {
  std::ostringstream s;
  s << "decode lens[" << join(seqlens) << "] HQ" << heads << " H" << kv_heads << " K" << head_dim << " V" << v_dim
    << " " << dtype_name(dtype);
  if (gate) s << (gate_scale ? " gate*scale" : " gate");
  if (sink) s << " sink";
  if (window) s << " window" << *window;
  if (row_pad) s << " strided";
  if (q_row_pad) s << " q-strided";
  return s.str();
}

DecodeCase DecodeCase::random(const DecodeConfig& cfg, Rng& rng) {
  DecodeCase c;
  c.cfg = cfg;
  const int64_t N = static_cast<int64_t>(cfg.seqlens.size()), T = cfg.total();
  c.q = OwnedTensor(cfg.dtype, {N, cfg.heads, cfg.head_dim}, Device::cpu, cfg.row_pad ? cfg.row_pad : cfg.q_row_pad);
  c.k = OwnedTensor(cfg.dtype, {T, cfg.kv_heads, cfg.head_dim}, Device::cpu, cfg.row_pad);
  c.v = OwnedTensor(cfg.dtype, {T, cfg.kv_heads, cfg.v_dim}, Device::cpu, cfg.row_pad);
  for (OwnedTensor* t : {&c.q, &c.k, &c.v}) t->fill_normal(rng);
  c.cu_seqlens = OwnedTensor(DType::i32, {N + 1});
  c.cu_seqlens.fill_index(offsets_of(cfg.seqlens));
  const DType fdt = cfg.dtype == DType::f64 ? DType::f64 : DType::f32;
  if (cfg.gate) {
    c.g = OwnedTensor(fdt, {T, cfg.heads});
    c.g.fill_log_sigmoid_normal(rng);
  }
  if (cfg.sink) {
    c.sink = OwnedTensor(fdt, {cfg.heads});
    c.sink.fill_normal(rng);
  }
  c.o = OwnedTensor(cfg.dtype, {N, cfg.heads, cfg.v_dim}, Device::cpu, cfg.row_pad);
  c.poison_outputs();
  return c;
}

DecodeCase DecodeCase::to(Device d) const {
  DecodeCase c;
  c.cfg = cfg;
  c.q = moved(q, d), c.k = moved(k, d), c.v = moved(v, d), c.cu_seqlens = moved(cu_seqlens, d);
  c.g = moved(g, d), c.sink = moved(sink, d), c.o = moved(o, d);
  return c;
}

DecodeCase DecodeCase::to_f64() const {
  DecodeCase c;
  c.cfg = cfg;
  c.cfg.dtype = DType::f64;
  c.cfg.row_pad = c.cfg.q_row_pad = 0;
  c.q = as_f64(q), c.k = as_f64(k), c.v = as_f64(v), c.cu_seqlens = as_f64(cu_seqlens);
  c.g = as_f64(g), c.sink = as_f64(sink), c.o = as_f64(o);
  return c;
}

void DecodeCase::poison_outputs() { poison_if(o); }

DecodeArgs DecodeCase::args() const {
  DecodeArgs a;
  a.q = q.view(), a.k = k.view(), a.v = v.view(), a.cu_seqlens = cu_seqlens.view(), a.o = o.view();
  a.g = g.view(), a.sink = sink.view();
  a.scale = cfg.scale;
  a.window = cfg.window;
  a.gate_scale = cfg.gate_scale;
  return a;
}

// ---- paged ----------------------------------------------------------------------------------------------

int64_t PagedConfig::total_q() const { return std::accumulate(query_lens.begin(), query_lens.end(), int64_t{0}); }

double PagedConfig::host_bytes() const {
  const double N = static_cast<double>(context_lens.size()), BS = static_cast<double>(block_size),
               HQ = static_cast<double>(heads), H = static_cast<double>(kv_heads), K = static_cast<double>(head_dim),
               V = static_cast<double>(v_dim), TQ = static_cast<double>(total_q());
  double blocks = static_cast<double>(spare_blocks), max_blocks = 1;
  for (int64_t L : context_lens) {
    const double b = std::ceil(static_cast<double>(L) / BS);
    blocks += b;
    max_blocks = std::max(max_blocks, b);
  }
  const DType f = companion_of(dtype), cache = fp8 ? DType::e4m3 : dtype;
  double bytes = tensor_bytes(DType::i32, {N, max_blocks}) + tensor_bytes(DType::i32, {N}) +
                 tensor_bytes(DType::i32, {N + 1}) + tensor_bytes(dtype, {TQ, HQ, K}, q_row_pad) +
                 tensor_bytes(dtype, {TQ, HQ, V}) + tensor_bytes(cache, {blocks, BS, H, K}) +
                 tensor_bytes(cache, {blocks, BS, H, V});
  if (sink) bytes += tensor_bytes(f, {HQ});
  for (detail::ScaleMode m : {k_mode(), v_mode()})
    if (m != detail::ScaleMode::none)
      bytes += m == detail::ScaleMode::per_token ? tensor_bytes(f, {blocks, H, BS}) : tensor_bytes(f, {1});
  // random() also holds the block table and ids as int64 vectors, and stages one cache in fp64 with its
  // per-slot maxima.
  bytes += 8 * (N * max_blocks + 2 * blocks) + tensor_bytes(DType::f64, {blocks, BS, H, std::max(K, V) + 1});
  return bytes;
}

std::string PagedConfig::describe() const {
  std::ostringstream s;
  s << "paged ctx[" << join(context_lens) << "] q[" << join(query_lens) << "] HQ" << heads << " H" << kv_heads << " K"
    << head_dim << " V" << v_dim << " block" << block_size << " " << dtype_name(dtype);
  auto mode_name = [](detail::ScaleMode m) {
    using detail::ScaleMode;
    return m == ScaleMode::per_token ? "per-token" : m == ScaleMode::per_tensor ? "per-tensor" : "unscaled";
  };
  if (fp8 && k_mode() == v_mode()) s << " fp8-" << mode_name(k_mode());
  else if (fp8) s << " fp8 K-" << mode_name(k_mode()) << " V-" << mode_name(v_mode());
  if (sink) s << " sink";
  if (window) s << " window" << *window;
  if (token_spread != 1.0) s << " spread" << token_spread;
  if (q_row_pad) s << " q-strided";
  if (max_seqlen_q) s << " max_seqlen_q" << *max_seqlen_q;
  return s.str();
}

PagedCase PagedCase::random(const PagedConfig& cfg, Rng& rng) {
  if (cfg.context_lens.size() != cfg.query_lens.size())
    throw Error(ErrorKind::invalid_argument, "query_lens", "harness: one query length per context length");
  PagedCase c;
  c.cfg = cfg;
  const int64_t N = static_cast<int64_t>(cfg.context_lens.size()), BS = cfg.block_size, H = cfg.kv_heads;
  std::vector<int64_t> blocks_of(N);
  int64_t needed = 0, max_blocks = 1;
  for (int64_t n = 0; n < N; ++n) {
    blocks_of[n] = (cfg.context_lens[n] + BS - 1) / BS;
    needed += blocks_of[n];
    max_blocks = std::max(max_blocks, blocks_of[n]);
  }
  const int64_t NB = needed + cfg.spare_blocks;
  std::vector<int64_t> ids(NB);
  std::iota(ids.begin(), ids.end(), 0);
  if (cfg.shuffle_blocks) std::shuffle(ids.begin(), ids.end(), rng);

  // Table: used entries take the permutation in order, unused ones hold -1 (never to be read).
  std::vector<int64_t> table(N * max_blocks, -1);
  std::vector<int64_t> owner_len(NB, 0);  // tokens held by each physical block (0: unused)
  int64_t next = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < blocks_of[n]; ++b) {
      const int64_t id = ids[next++];
      table[n * max_blocks + b] = id;
      owner_len[id] = std::min(BS, cfg.context_lens[n] - b * BS);
    }
  c.block_table = OwnedTensor(DType::i32, {N, max_blocks});
  c.block_table.fill_index(table);
  c.seq_lens_k = OwnedTensor(DType::i32, {N});
  c.seq_lens_k.fill_index(cfg.context_lens);
  c.cu_seqlens_q = OwnedTensor(DType::i32, {N + 1});
  c.cu_seqlens_q.fill_index(offsets_of(cfg.query_lens));

  c.q = OwnedTensor(cfg.dtype, {cfg.total_q(), cfg.heads, cfg.head_dim}, Device::cpu, cfg.q_row_pad);
  c.q.fill_normal(rng);
  const DType fdt = cfg.dtype == DType::f64 ? DType::f64 : DType::f32;
  if (cfg.sink) {
    c.sink = OwnedTensor(fdt, {cfg.heads});
    c.sink.fill_normal(rng);
  }
  c.o = OwnedTensor(cfg.dtype, {cfg.total_q(), cfg.heads, cfg.v_dim});

  // Real-valued K/V per slot with per-(token, head) magnitudes; quantised to fp8 when asked.
  const DType cache_dtype = cfg.fp8 ? DType::e4m3 : cfg.dtype;
  // Each operand's scales by its mode (K: scale_mode; V: v_scale_mode where set).
  auto make_scales = [&](detail::ScaleMode mode) {
    return mode == detail::ScaleMode::per_token    ? OwnedTensor(fdt, {NB, H, BS})
           : mode == detail::ScaleMode::per_tensor ? OwnedTensor(fdt, {1})
                                                   : OwnedTensor();
  };
  c.k_scale = make_scales(cfg.k_mode());
  c.v_scale = make_scales(cfg.v_mode());
  auto build_cache = [&](OwnedTensor& cache, OwnedTensor& scales, int64_t D, detail::ScaleMode mode) {
    const bool per_token = mode == detail::ScaleMode::per_token, per_tensor = mode == detail::ScaleMode::per_tensor;
    cache = OwnedTensor(cache_dtype, {NB, BS, H, D});
    std::vector<double> real(static_cast<size_t>(NB * BS * H * D), 0.0);
    std::vector<double> tok_amax(static_cast<size_t>(NB * BS * H), 0.0);
    // Slots in chunks on the CPU worker threads, each with its own chunk_engine (values depend on the seed
    // alone, as for the tensor fills).
    constexpr int64_t kSlotsPerChunk = 4096;
    const int64_t slots = NB * BS * H, chunks = (slots + kSlotsPerChunk - 1) / kSlotsPerChunk;
    const uint64_t base = rng();
    std::vector<double> chunk_amax(static_cast<size_t>(chunks), 0.0);
    cpu::parallel_for(chunks, [&](int64_t ch) {
      Rng engine = chunk_engine(base, ch);
      std::normal_distribution<double> normal(0.0, 1.0);
      std::uniform_real_distribution<double> unit(0.0, 1.0);
      for (int64_t i = ch * kSlotsPerChunk; i < std::min(slots, (ch + 1) * kSlotsPerChunk); ++i) {
        const double mag = std::exp(-std::log(cfg.token_spread) * unit(engine));
        for (int64_t d = 0; d < D; ++d) {
          const double x = normal(engine) * mag;
          real[i * D + d] = x;
          tok_amax[i] = std::max(tok_amax[i], std::fabs(x));
        }
        chunk_amax[ch] = std::max(chunk_amax[ch], tok_amax[i]);
      }
    });
    const double amax = chunks ? *std::max_element(chunk_amax.begin(), chunk_amax.end()) : 0.0;
    std::vector<double> scale_vals;
    if (per_token) {  // scales are laid out [NB, H, BS]; cache slots [NB, BS, H]
      scale_vals.assign(static_cast<size_t>(NB * H * BS), 1.0);
      for (int64_t b = 0; b < NB; ++b)
        for (int64_t s = 0; s < BS; ++s)
          for (int64_t h = 0; h < H; ++h) {
            const int64_t slot = (b * BS + s) * H + h;
            const double sc = std::max(tok_amax[slot], 1e-12) / 448.0;
            scale_vals[(b * H + h) * BS + s] = sc;
            for (int64_t d = 0; d < D; ++d) real[slot * D + d] /= sc;
          }
    } else if (per_tensor) {
      const double sc = amax / 448.0;
      scale_vals = {sc};
      for (double& x : real) x /= sc;
    }
    cache.set_values(real);
    if (scales.defined()) scales.set_values(scale_vals);
  };
  build_cache(c.k_cache, c.k_scale, cfg.head_dim, cfg.k_mode());
  build_cache(c.v_cache, c.v_scale, cfg.v_dim, cfg.v_mode());

  // NaN bytes in every slot that no sequence uses, so a kernel that reads one shows it.
  if (cfg.nan_unused) {
    auto nan_slots = [&](OwnedTensor& cache, int64_t D) {
      const size_t es = dtype_size(cache.view().dtype);
      auto* bytes = static_cast<unsigned char*>(cache.view().data);
      for (int64_t b = 0; b < NB; ++b)
        for (int64_t s = owner_len[b]; s < BS; ++s)
          std::fill(bytes + ((b * BS + s) * H) * D * es, bytes + ((b * BS + s + 1) * H) * D * es, 0xff);
    };
    nan_slots(c.k_cache, cfg.head_dim);
    nan_slots(c.v_cache, cfg.v_dim);
    for (OwnedTensor* sc : {&c.k_scale, &c.v_scale}) {
      if (!sc->defined() || sc->view().rank != 3) continue;  // per-token scales only
      auto* p = static_cast<unsigned char*>(sc->view().data);
      const size_t es = dtype_size(sc->view().dtype);
      for (int64_t b = 0; b < NB; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t s = owner_len[b]; s < BS; ++s)
            std::fill(p + ((b * H + h) * BS + s) * es, p + ((b * H + h) * BS + s + 1) * es, 0xff);
    }
  }
  c.poison_outputs();
  return c;
}

PagedCase PagedCase::to(Device d) const {
  PagedCase c;
  c.cfg = cfg;
  c.q = moved(q, d), c.k_cache = moved(k_cache, d), c.v_cache = moved(v_cache, d);
  c.block_table = moved(block_table, d), c.seq_lens_k = moved(seq_lens_k, d), c.cu_seqlens_q = moved(cu_seqlens_q, d);
  c.sink = moved(sink, d), c.k_scale = moved(k_scale, d), c.v_scale = moved(v_scale, d), c.o = moved(o, d);
  return c;
}

PagedCase PagedCase::to_f64() const {
  PagedCase c;
  c.cfg = cfg;
  c.cfg.dtype = DType::f64;
  c.cfg.q_row_pad = 0;
  c.q = as_f64(q), c.k_cache = as_f64(k_cache), c.v_cache = as_f64(v_cache);
  c.block_table = as_f64(block_table), c.seq_lens_k = as_f64(seq_lens_k), c.cu_seqlens_q = as_f64(cu_seqlens_q);
  c.sink = as_f64(sink), c.k_scale = as_f64(k_scale), c.v_scale = as_f64(v_scale), c.o = as_f64(o);
  return c;
}

void PagedCase::poison_outputs() { poison_if(o); }

PagedArgs PagedCase::args() const {
  PagedArgs a;
  a.q = q.view(), a.k_cache = k_cache.view(), a.v_cache = v_cache.view(), a.block_table = block_table.view();
  a.seq_lens_k = seq_lens_k.view(), a.cu_seqlens_q = cu_seqlens_q.view(), a.o = o.view(), a.sink = sink.view();
  a.k_scale = k_scale.view(), a.v_scale = v_scale.view();
  a.scale = cfg.scale;
  a.window = cfg.window;
  a.max_seqlen_q = cfg.max_seqlen_q;
  return a;
}

double PagedCase::kv_bytes_read() const {
  double tokens = 0;
  for (int64_t L : cfg.context_lens) tokens += static_cast<double>(L);
  const double es = static_cast<double>(dtype_size(k_cache.view().dtype));
  double per_token = es * cfg.kv_heads * static_cast<double>(cfg.head_dim + cfg.v_dim);
  for (detail::ScaleMode m : {cfg.k_mode(), cfg.v_mode()})
    if (m == detail::ScaleMode::per_token) per_token += 4.0 * cfg.kv_heads;
  return tokens * per_token;
}

}  // namespace flashgate::harness
