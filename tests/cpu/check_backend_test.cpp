// SPEC §8-§9: a forced backend that cannot run the request is refused (per call and through
// FLASHGATE_BACKEND), unknown backend names are refused, and a few messages read exactly as documented.
#include <cstdlib>
#include <optional>
#include <string>

#include "small_bases.h"

namespace fgtest {
namespace {

using flashgate::Backend;

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct OpNames {
  template <class Args>
  static std::string GetName(int) {
    return OpTraits<Args>::name;
  }
};

template <class Args>
class BackendChoice : public testing::Test {
 protected:
  void SetUp() override {
    seed_ = flashgate::harness::fresh_seed();
    trace_.emplace(__FILE__, __LINE__, "seed " + std::to_string(seed_));
  }
  Subject<Args> base() const { return standard_base<Args>(seed_); }

 private:
  uint64_t seed_ = 0;
  std::optional<testing::ScopedTrace> trace_;
};

using AllOps = testing::Types<ForwardArgs, BackwardArgs, DecodeArgs, PagedArgs>;
TYPED_TEST_SUITE(BackendChoice, AllOps, OpNames);

const Rejection kBackendRefused{"backend", ErrorKind::unsupported, true};

TYPED_TEST(BackendChoice, ForcedCudaOnHostTensorsIsRefused) {
  ScopedEnv env("FLASHGATE_BACKEND", nullptr);
  auto s = this->base();
  s.launch.backend = Backend::cuda;
  expect_rejected(s, kBackendRefused);
}

TYPED_TEST(BackendChoice, ForcedHopperOnHostTensorsIsRefused) {
  ScopedEnv env("FLASHGATE_BACKEND", nullptr);
  auto s = this->base();
  s.launch.backend = Backend::hopper;
  expect_rejected(s, kBackendRefused);
}

TYPED_TEST(BackendChoice, ForcedCpuOnGpuTensorsIsRefused) {
  ScopedEnv env("FLASHGATE_BACKEND", nullptr);
  auto s = this->base();
  s.to_gpu();
  s.args.validate = false;  // labelled host memory (no GPU here) must not be read as GPU memory
  s.launch.backend = Backend::cpu;
  expect_rejected(s, kBackendRefused);
}

TYPED_TEST(BackendChoice, EnvironmentForcingCudaOnHostTensorsIsRefused) {
  ScopedEnv env("FLASHGATE_BACKEND", "cuda");
  expect_rejected(this->base(), kBackendRefused);
}

TYPED_TEST(BackendChoice, EnvironmentWithAnUnknownNameIsRefused) {
  ScopedEnv env("FLASHGATE_BACKEND", "gpu");
  const std::string message =
      expect_rejected(this->base(), Rejection{"FLASHGATE_BACKEND", ErrorKind::invalid_argument, false});
  EXPECT_NE(message.find("'gpu'"), std::string::npos) << message;
}

TYPED_TEST(BackendChoice, ExplicitBackendWinsOverTheEnvironment) {
  ScopedEnv env("FLASHGATE_BACKEND", "cuda");
  auto s = this->base();
  s.launch.backend = Backend::cpu;
  expect_accepted(s);
}

TYPED_TEST(BackendChoice, EnvironmentMayNameTheCpu) {
  ScopedEnv env("FLASHGATE_BACKEND", "cpu");
  expect_accepted(this->base());
}

TEST(BackendNames, KnownNamesParse) {
  EXPECT_EQ(flashgate::parse_backend("auto"), Backend::automatic);
  EXPECT_EQ(flashgate::parse_backend("automatic"), Backend::automatic);
  EXPECT_EQ(flashgate::parse_backend(""), Backend::automatic);
  for (Backend b : {Backend::cpu, Backend::cuda, Backend::hopper})
    EXPECT_EQ(flashgate::parse_backend(flashgate::backend_name(b)), b);
}

TEST(BackendNames, UnknownNamesAreRefused) {
  for (const char* name : {"gpu", "CPU", "cuda ", "sm90", "auto,cpu"}) {
    try {
      flashgate::parse_backend(name);
      ADD_FAILURE() << "accepted backend name '" << name << "'";
    } catch (const flashgate::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_EQ(e.argument(), "backend");
      EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos) << e.what();
    }
    try {
      flashgate::parse_backend(name, "--backend");
      ADD_FAILURE() << "accepted backend name '" << name << "'";
    } catch (const flashgate::Error& e) {
      EXPECT_EQ(e.argument(), "--backend");
      EXPECT_EQ(std::string(e.what()).rfind("flashgate: --backend: unknown backend", 0), 0u) << e.what();
    }
  }
}

// The documented message shape "flashgate: <op>: <argument>: <rule>, got <what>", word for word.
TEST(Messages, ReadAsDocumented) {
  const uint64_t seed = flashgate::harness::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  {
    auto s = decode_base(seed);
    s.set_index("cu_seqlens", {3, 3, 3, 7});
    EXPECT_EQ(expect_rejected(s, {"cu_seqlens"}), "flashgate: decode: cu_seqlens: must start at 0, got 3");
  }
  {
    auto s = packed_base<ForwardArgs>(seed);
    s.set_index("cu_seqlens", {0, 3, 2, 5});
    EXPECT_EQ(expect_rejected(s, {"cu_seqlens"}),
              "flashgate: attention_forward: cu_seqlens: must not decrease, got 3 then 2 at index 2");
  }
  {
    auto s = dense_base<BackwardArgs>(seed);
    s.resize("k", 2, 3), s.resize("v", 2, 3);
    EXPECT_EQ(expect_rejected(s, {"k"}),
              "flashgate: attention_backward: k: query heads must be a multiple of key/value heads (HQ % H == 0), "
              "got HQ=4 H=3");
  }
  {
    auto s = dense_base<ForwardArgs>(seed);
    s.resize("k", 1, 6);
    EXPECT_EQ(expect_rejected(s, {"k"}),
              "flashgate: attention_forward: k: expected shape [B,T,H,K] = [2,5,H,8], got [2,6,2,8]");
  }
  {
    auto s = paged_base(seed);
    s.set_index_at("block_table", 3, 6);
    EXPECT_EQ(expect_rejected(s, {"block_table"}),
              "flashgate: paged_attention: block_table: entry 6 at [1,1] is out of range [0,6)");
  }
  {
    auto s = paged_base(seed);
    s.set_index_at("seq_lens_k", 1, 40);
    EXPECT_EQ(expect_rejected(s, {"seq_lens_k"}),
              "flashgate: paged_attention: seq_lens_k: is larger than the block table holds (32 tokens), got 40 "
              "for sequence 1");
  }
  {
    auto s = paged_base(seed);
    s.resize("q", 2, 577), s.resize("k_cache", 3, 577);
    EXPECT_EQ(expect_rejected(s, {"q"}), "flashgate: paged_attention: q: head dim K must be in 1..576, got 577");
  }
  {
    auto s = dense_base<ForwardArgs>(seed);
    s.retype("v", DType::bf16);
    EXPECT_EQ(expect_rejected(s, {"v", ErrorKind::wrong_type}),
              "flashgate: attention_forward: v: dtype must match q (float32), got bfloat16");
  }
}

}  // namespace
}  // namespace fgtest
