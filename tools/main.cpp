// The flashgate command-line program.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "bench.h"
#include "options.h"
#include "run_op.h"

namespace {

int dispatch(std::string command, std::vector<std::string> args) {
  using namespace flashgate::cli;
  if (command == "version") {
    std::printf("flashgate %s\n", flashgate::version());
    return 0;
  }
  if (command == "help" || command == "-h" || asks_for_help(args)) {
    std::printf("%s", usage());
    return 0;
  }
  if (command == "bench") return run_bench(args);
  if (command != "run") throw UsageError{"unknown command '" + command + "'"};
  return run_op(parse_run_options(args));
}

}  // namespace

// Every failure ends in a message and a documented exit code (usage: 2 bad usage, 3 library error), never in
// an abort: whatever escapes the library's own errors (an allocation, the standard library) is a library error.
int main(int argc, char** argv) {
  using namespace flashgate::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command = "run";  // `flashgate` alone (or with options only) runs the default problem
  if (!args.empty() && args[0].rfind("--", 0) != 0) {
    command = args[0];
    args.erase(args.begin());
  }
  try {
    return dispatch(command, args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flashgate: %s\n\n%s", e.message.c_str(), usage());
    return 2;
  } catch (const flashgate::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "flashgate: out of host memory (std::bad_alloc): try a smaller problem\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashgate: unexpected error: %s\n", e.what());
    return 3;
  } catch (...) {
    std::fprintf(stderr, "flashgate: unexpected error of unknown type\n");
    return 3;
  }
}
