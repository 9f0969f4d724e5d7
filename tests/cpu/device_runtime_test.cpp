// Messages of failed CUDA calls (api/device_runtime.h). The statuses that mean "this machine has no usable
// GPU" must say so in those words: a CUDA build on a machine without a GPU (CI) otherwise reported a driver
// version error. Checked here through the status-to-message function, since no test machine can be both.
#include <gtest/gtest.h>

#include <string>

#include "api/device_runtime.h"
#include "flashgate/error.h"

namespace flashgate::detail {
namespace {

// cudaError_t values (stable across CUDA releases; device_runtime.cpp asserts them against the headers).
constexpr int kCudaErrorMemoryAllocation = 2, kCudaErrorInsufficientDriver = 35, kCudaErrorNoDevice = 100;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CudaErrorMessage, InsufficientDriverMeansNoDeviceAndKeepsTheReason) {
  const std::string m = cuda_error_message(kCudaErrorInsufficientDriver, "cudaGetDeviceCount");
  EXPECT_TRUE(contains(m, "no CUDA device is available")) << m;
  EXPECT_TRUE(contains(m, "cudaErrorInsufficientDriver")) << m;
  EXPECT_TRUE(contains(m, "cudaGetDeviceCount")) << m;
}

TEST(CudaErrorMessage, NoDeviceMeansNoDevice) {
  const std::string m = cuda_error_message(kCudaErrorNoDevice, "cudaMalloc");
  EXPECT_TRUE(contains(m, "no CUDA device is available")) << m;
  EXPECT_TRUE(contains(m, "cudaErrorNoDevice")) << m;
}

TEST(CudaErrorMessage, OtherFailuresAreNotCalledMissingDevices) {
  const std::string m = cuda_error_message(kCudaErrorMemoryAllocation, "cudaMalloc");
  EXPECT_FALSE(contains(m, "no CUDA device")) << m;
  EXPECT_TRUE(contains(m, "CUDA error in cudaMalloc")) << m;
}

TEST(CudaErrorMessage, CheckCudaThrowsTheMessage) {
  try {
    check_cuda(kCudaErrorInsufficientDriver, "cudaGetDeviceCount");
    FAIL() << "check_cuda accepted a failure status";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_EQ(std::string(e.what()), cuda_error_message(kCudaErrorInsufficientDriver, "cudaGetDeviceCount"));
  }
  EXPECT_NO_THROW(check_cuda(0, "cudaMalloc"));
}

// Whatever this machine has: the reason is empty exactly when a device is there, and otherwise says so (in a
// CUDA build on CI this is the real cudaGetDeviceCount failure).
TEST(CudaDevice, UnavailableReasonMatchesPresence) {
  const std::string why = cuda_device_unavailable();
  EXPECT_EQ(why.empty(), cuda_device_present()) << why;
  if (!why.empty()) EXPECT_TRUE(contains(why, "no CUDA device is available")) << why;
}

}  // namespace
}  // namespace flashgate::detail
