// The flashgate command-line program.
#include <cstdio>
#include <string>
#include <vector>

#include "flashgate/flashgate.h"
#include "bench.h"
#include "options.h"
#include "run_op.h"

int main(int argc, char** argv) {
  using namespace flashgate::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command = "run";  // `flashgate` alone runs the default problem
  if (!args.empty() && args[0].rfind("--", 0) != 0) {
    command = args[0];
    args.erase(args.begin());
  }
  try {
    if (command == "version") {
      std::printf("flashgate %s\n", flashgate::version());
      return 0;
    }
    if (command == "help" || command == "-h") {
      std::printf("%s", usage());
      return 0;
    }
    if (command == "bench") return run_bench(args);
    if (command != "run") throw UsageError{"unknown command '" + command + "'"};
    return run_op(parse_run_options(args));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flashgate: %s\n\n%s", e.message.c_str(), usage());
    return 2;
  } catch (const flashgate::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  }
}
