// The one error type of the library.
#pragma once

#include <stdexcept>
#include <string>

namespace flashgate {

// What went wrong, coarsely: the Python layer maps these to ValueError / TypeError /
// NotImplementedError / RuntimeError.
enum class ErrorKind : int {
  invalid_argument,  // a shape, value or layout breaks the contract (SPEC §8)
  wrong_type,        // a dtype or device that the op does not take
  unsupported,       // valid input that the requested backend cannot run
  runtime,           // a CUDA call failed
};

// Raised before any kernel runs when an argument is bad (nothing is written to any output then),
// and after a failed CUDA call. `argument()` names the offending argument ("" when none does).
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string argument, const std::string& message)
      : std::runtime_error(message), kind_(kind), argument_(std::move(argument)) {}
  ErrorKind kind() const { return kind_; }
  const std::string& argument() const { return argument_; }

 private:
  ErrorKind kind_;
  std::string argument_;
};

}  // namespace flashgate
