// kiln-fuzz: differential fuzzing of the JIT and the standard executor
// against the float64 reference evaluator.
//
//   kiln-fuzz --seed S --count N [--start I] [--max-nodes K] [--batch B]
//             [--jobs J] [--executors LIST] [--verbose] [--keep-going]
//             [--no-shrink] [--dump] [--gradients] [--half-precision]
//   kiln-fuzz --replay FILE [--seed S] [--executors LIST] [--no-shrink]
//             [--gradients] [--half-precision]
//
// Generates N random graphs numbered from I (default 0; graph i of seed S
// is always the same graph, see graph_generator.h), runs B of them at a time
// as one graph (one JIT compile per batch; default 16), J batches in parallel
// (default 2), and compares. On a failure -- a mismatch, or any exception --
// it finds the graph at fault, shrinks it (shrinker.h), prints the smallest
// failing graph as IR text (with its inputs in comments) and exits 1 (with
// --keep-going after all N graphs).
// A crash prints the graph being run and restarts kiln-fuzz to find the
// crashing graph and shrink it in child processes (crash.h). --dump prints
// every generated graph. --replay runs one IR file (inputs from its
// "# input %i: [...]" comments, else random) and shrinks it if it fails.
// --executors chooses what is checked against the reference, from
// `standard`, `jit`, `cuda-emulated` (the CUDA JIT's kernels run on the
// host, cuda_emulation.h; needs a kiln built with CUDA support) and `cuda`
// (the standard executor and the JIT on cuda:0: a GPU, or the CUDA simulator
// of a KILN_CUDA=SIMULATED build), comma separated; the default is
// standard,jit.
// --gradients checks derivatives instead (gradient_check.h): each graph
// becomes a random scalar function of its float inputs, differentiated by
// kiln's autodiff transformation; the derivative graph runs on the executors
// against the reference, and its float64 derivatives (reverse and forward
// mode) are compared with finite differences. Graphs near kinks, poles or
// overflow have their hazards replaced (gradient_hazards.h), counted by kind.
// --half-precision generates bf16 and f16 values too.
// Graphs have control flow (cond, while_loop, scan_loop) but with the
// cuda-emulated or cuda executors, which cannot check it: there the generator
// makes none; with --gradients, no while_loop (it has no reverse mode).
//
// Exit status: 0 all agree, 1 a failure, 2 bad usage.

#include "crash.h"
#include "cuda_emulation.h"
#include "derivative_graph.h"
#include "differential_check.h"
#include "fuzz_case.h"
#include "gradient_check.h"
#include "gradient_hazards.h"
#include "graph_generator.h"
#include "hazards.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "random_source.h"
#include "shrinker.h"

#include <kiln/error.h>

#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

namespace kiln::fuzz {
namespace {

struct Options {
  std::uint64_t seed = 1;
  std::int64_t count = 100;
  std::int64_t start = 0;  // the first graph's index
  int batch = 16;
  int jobs = 2;
  GeneratorOptions generator;
  CheckOptions check;
  std::string executors = "standard,jit";
  bool verbose = false;
  bool keep_going = false;
  bool shrink = true;
  bool dump = false;
  bool gradients = false;     // check derivatives (gradient_check.h)
  bool find_crash = false;    // internal: after a crash of graphs [start, start + count)
  bool shrink_crash = false;  // internal: after a crash replaying `replay`
  std::string replay;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "kiln-fuzz: " << problem << "\n"
            << "usage: kiln-fuzz --seed S --count N [--start I] [--max-nodes K] [--batch B] [--jobs J]\n"
               "                 [--executors standard,jit,cuda-emulated,cuda] [--verbose] [--keep-going]\n"
               "                 [--no-shrink] [--dump] [--gradients] [--half-precision]\n"
            << "       kiln-fuzz --replay FILE [--seed S] [--executors LIST] [--verbose] [--no-shrink] [--gradients]\n";
  std::exit(2);
}

std::int64_t number(const char* text, const char* flag, std::int64_t minimum) {
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (!*text || *end || value < minimum) usage(std::string("bad value for ") + flag + ": " + text);
  return value;
}

CheckOptions parse_executors(const std::string& list) {
  CheckOptions check;
  check.standard = check.jit = false;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    if (item == "standard")
      check.standard = true;
    else if (item == "jit")
      check.jit = true;
    else if (item == "cuda-emulated")
      check.cuda_emulated = true;
    else if (item == "cuda")
      check.cuda = true;
    else
      usage("unknown executor '" + item + "' in --executors (standard, jit, cuda-emulated, cuda)");
  }
  if (!check.standard && !check.jit && !check.cuda_emulated && !check.cuda) usage("--executors names no executor");
  if (check.cuda_emulated && !cuda_emulation_available())
    usage("cuda-emulated needs a kiln built with CUDA support (cmake -DKILN_CUDA=ON)");
  if (check.cuda && !cuda_device_available())
    usage("cuda needs a kiln built with CUDA support and a GPU, or the CUDA simulator (cmake -DKILN_CUDA=SIMULATED)");
  return check;
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--seed") options.seed = static_cast<std::uint64_t>(number(value(), "--seed", 0));
    else if (flag == "--count") options.count = number(value(), "--count", 0);
    else if (flag == "--start") options.start = number(value(), "--start", 0);
    else if (flag == "--max-nodes") options.generator.max_nodes = static_cast<int>(number(value(), "--max-nodes", 1));
    else if (flag == "--batch") options.batch = static_cast<int>(number(value(), "--batch", 1));
    else if (flag == "--jobs") options.jobs = static_cast<int>(number(value(), "--jobs", 1));
    else if (flag == "--verbose") options.verbose = true;
    else if (flag == "--keep-going") options.keep_going = true;
    else if (flag == "--no-shrink") options.shrink = false;
    else if (flag == "--dump") options.dump = true;
    else if (flag == "--gradients") options.gradients = true;
    else if (flag == "--half-precision") options.generator.half_precision = true;
    else if (flag == "--find-crash") options.find_crash = true;
    else if (flag == "--shrink-crash") options.shrink_crash = true;
    else if (flag == "--replay") options.replay = value();
    else if (flag == "--executors")
      options.executors = value();
    else usage("unknown argument " + flag);
  }
  options.check = parse_executors(options.executors);
  // No control flow where it cannot be checked: the CUDA JIT (and so its emulation) refuses it with a
  // CompileError, and autodiff does not differentiate through it. (Child processes get the same arguments, so
  // they regenerate the same graphs.)
  options.generator.control_flow = !options.check.cuda_emulated && !options.check.cuda;
  options.generator.while_loops = !options.gradients;
  return options;
}

// ---- Checking, shrinking and reporting ----

// The check of the mode: the executors against the reference, or (--gradients) the derivatives.
std::vector<Failure> check_case(const FuzzCase& fuzz_case, bool gradients, const CheckOptions& check_options,
                                CheckTimes* times = nullptr) {
  if (gradients) return check_gradients(fuzz_case, {check_options, nullptr}, times);
  return check(fuzz_case, check_options, times);
}

// The command-line arguments that select the check, for child processes.
std::vector<std::string> check_arguments(const Options& options) {
  std::vector<std::string> arguments = {"--executors", options.executors};
  if (options.gradients) arguments.push_back("--gradients");
  if (options.generator.half_precision) arguments.push_back("--half-precision");
  return arguments;
}

StillFails same_failure(const std::string& signature, bool gradients) {
  // The executor named after the optional "gradient " prefix is the one to run (the reference always runs).
  constexpr std::string_view prefix = "gradient ";
  const std::string executor = signature.substr(gradients && signature.rfind(prefix, 0) == 0 ? prefix.size() : 0);
  CheckOptions check_options;
  check_options.jit = executor.rfind("jit", 0) == 0;
  check_options.standard = executor.rfind("standard", 0) == 0;
  check_options.cuda_emulated = executor.rfind("cuda-emulated", 0) == 0;
  check_options.cuda = executor.rfind("cuda-standard", 0) == 0 || executor.rfind("cuda-jit", 0) == 0;
  return [signature, check_options, gradients](const FuzzCase& candidate) {
    if (!find_hazards(candidate).empty()) return false;
    if (gradients && !find_gradient_hazards(candidate).empty()) return false;
    set_crash_context(describe(candidate));
    for (const Failure& failure : check_case(candidate, gradients, check_options))
      if (failure.signature() == signature) return true;
    return false;
  };
}

// Shrinks a failing case and prints the report.
void report(const FuzzCase& fuzz_case, const Failure& failure, const std::string& origin, const Options& options) {
  std::cout << "\nFAILURE in " << origin << ": " << failure.to_string() << "\n";
  FuzzCase smallest = fuzz_case;
  if (options.shrink) {
    ShrinkStatistics statistics;
    ShrinkOptions shrink_options;
    shrink_options.verbose = options.verbose;
    smallest = shrink(fuzz_case, same_failure(failure.signature(), options.gradients), shrink_options, &statistics);
    std::cout << "shrunk from " << fuzz_case.graph.size() << " to " << smallest.graph.size() << " nodes ("
              << statistics.attempts << " attempts, " << statistics.accepted << " accepted, "
              << static_cast<int>(statistics.seconds) << " s)\n";
    for (const Failure& again : check_case(smallest, options.gradients, options.check))
      if (again.signature() == failure.signature()) {
        std::cout << "minimized failure: " << again.to_string() << "\n";
        break;
      }
  }
  std::cout << "--- minimized graph (" << origin << ") ---\n" << describe(smallest) << "---\n" << std::flush;
}

// ---- Replay ----

// Inputs from "# input %i: [a, b, ...]" comments where present, else random.
std::vector<runtime::Array> replay_inputs(const ir::Graph& graph, const std::string& text, RandomSource& random) {
  std::vector<runtime::Array> inputs;
  for (ir::ValueId parameter : graph.parameters) inputs.push_back(random_input(graph.type(parameter), random));
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::size_t position = 0;
    if (std::sscanf(line.c_str(), "# input %%%zu:", &position) != 1 || position >= inputs.size()) continue;
    std::size_t open = line.find('['), close = line.rfind(']');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::vector<std::string> items;
    std::stringstream list(line.substr(open + 1, close - open - 1));
    for (std::string item; std::getline(list, item, ',');)
      if (item.find_first_not_of(' ') != std::string::npos) items.push_back(item);
    runtime::Array& input = inputs[position];
    if (static_cast<std::int64_t>(items.size()) != input.shape.numel()) continue;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const char* item = items[i].c_str();
      while (*item == ' ') ++item;
      switch (input.dtype) {
        case DType::boolean: input.mutable_data<std::uint8_t>()[i] = std::strncmp(item, "true", 4) == 0; break;
        case DType::i32: input.mutable_data<std::int32_t>()[i] = static_cast<std::int32_t>(std::strtoll(item, nullptr, 10)); break;
        case DType::i64: input.mutable_data<std::int64_t>()[i] = std::strtoll(item, nullptr, 10); break;
        case DType::f32: input.mutable_data<float>()[i] = std::strtof(item, nullptr); break;
        case DType::f64: input.mutable_data<double>()[i] = std::strtod(item, nullptr); break;
        case DType::bf16: input.mutable_data<std::uint16_t>()[i] = to_bfloat16(std::strtod(item, nullptr)).bits; break;
        case DType::f16: input.mutable_data<std::uint16_t>()[i] = to_float16(std::strtod(item, nullptr)).bits; break;
      }
    }
  }
  return inputs;
}

// ---- Crashes (see crash.h) ----

// Shrinks a case that crashes kiln-fuzz (in child processes) and prints it.
int report_crash(const FuzzCase& fuzz_case, const std::string& origin, const Options& options) {
  std::cout << "\nCRASH in " << origin << "\n";
  FuzzCase smallest = fuzz_case;
  if (options.shrink) {
    ShrinkStatistics statistics;
    ShrinkOptions shrink_options;
    shrink_options.verbose = options.verbose;
    auto crashes = [&options](const FuzzCase& candidate) {
      return crashes_in_child(candidate, check_arguments(options));
    };
    smallest = shrink(fuzz_case, crashes, shrink_options, &statistics);
    std::cout << "shrunk from " << fuzz_case.graph.size() << " to " << smallest.graph.size() << " nodes ("
              << statistics.attempts << " attempts, " << statistics.accepted << " accepted, "
              << static_cast<int>(statistics.seconds) << " s)\n";
  }
  std::cout << "--- minimized graph (" << origin << "), crashes kiln-fuzz --replay ---\n"
            << describe(smallest) << "---\n"
            << std::flush;
  return 1;
}

// Graphs [start, start + count) crashed when run together: which one does
// alone, or else the batch.
int find_crash(const Options& options) {
  std::vector<std::string> common = {"--seed",
                                     std::to_string(options.seed),
                                     "--max-nodes",
                                     std::to_string(options.generator.max_nodes),
                                     "--no-shrink",
                                     "--jobs",
                                     "1"};
  for (const std::string& argument : check_arguments(options)) common.push_back(argument);
  for (std::int64_t index = options.start; index < options.start + options.count; ++index) {
    std::vector<std::string> arguments = common;
    arguments.insert(arguments.end(), {"--start", std::to_string(index), "--count", "1"});
    if (!child_crashes(arguments)) continue;
    return report_crash(generate_graph(options.seed, static_cast<std::uint64_t>(index), options.generator),
                        "graph " + std::to_string(index) + " of seed " + std::to_string(options.seed), options);
  }
  std::vector<FuzzCase> cases;
  for (std::int64_t index = options.start; index < options.start + options.count; ++index)
    cases.push_back(generate_graph(options.seed, static_cast<std::uint64_t>(index), options.generator));
  FuzzCase batch = merge(cases, "fuzz_" + std::to_string(options.seed) + "_" + std::to_string(options.start), nullptr);
  if (!crashes_in_child(batch, check_arguments(options))) {
    std::cout << "kiln-fuzz: graphs " << options.start << ".." << options.start + options.count - 1
              << " crashed together in a batch, but neither alone nor merged in a new process\n";
    return 1;
  }
  return report_crash(batch,
                      "graphs " + std::to_string(options.start) + ".." +
                          std::to_string(options.start + options.count - 1) + " of seed " +
                          std::to_string(options.seed) + " together",
                      options);
}

// ---- Replay ----

FuzzCase read_case(const Options& options) {
  std::ifstream file(options.replay);
  if (!file) usage("cannot read " + options.replay);
  std::stringstream buffer;
  buffer << file.rdbuf();
  FuzzCase fuzz_case;
  try {
    fuzz_case.graph = ir::parse(buffer.str());
  } catch (const Error& error) {
    std::cerr << error.what() << "\n";
    std::exit(2);
  }
  RandomSource random(options.seed);
  fuzz_case.inputs = replay_inputs(fuzz_case.graph, buffer.str(), random);
  return fuzz_case;
}

int replay(const Options& options) {
  FuzzCase fuzz_case = read_case(options);
  if (options.shrink_crash) return report_crash(fuzz_case, options.replay, options);
  // A crash reruns this file in --shrink-crash mode (unless this is already
  // a child checking one candidate).
  if (options.shrink) {
    std::vector<std::string> command = {"--replay", options.replay, "--shrink-crash", "--seed",
                                        std::to_string(options.seed)};
    for (const std::string& argument : check_arguments(options)) command.push_back(argument);
    set_crash_command(command);
  }
  std::vector<Hazard> hazards = find_hazards(fuzz_case);
  if (options.gradients)
    for (const Hazard& hazard : find_gradient_hazards(fuzz_case)) hazards.push_back(hazard);
  for (const Hazard& hazard : hazards)
    std::cout << "warning: hazard at " << describe_place(hazard) << ": " << hazard.reason
              << " (a mismatch there may not be a bug)\n";
  if (options.verbose && options.check.cuda_emulated) {
    try {
      std::cout << "--- generated CUDA ---\n" << generated_cuda_source(fuzz_case.graph) << "---\n";
    } catch (const std::exception& error) {
      std::cout << "no CUDA module: " << error.what() << "\n";
    }
  }
  if (options.verbose && options.gradients && has_float_path(fuzz_case)) {
    try {
      std::cout << "--- derivative graph ---\n" << describe(build_derivative_case(fuzz_case).fuzz_case) << "---\n";
    } catch (const std::exception& error) {
      std::cout << "no derivative graph: " << error.what() << "\n";
    }
  }
  set_crash_context(describe(fuzz_case));
  std::vector<Failure> failures = check_case(fuzz_case, options.gradients, options.check);
  if (failures.empty()) {
    std::cout << "ok: " << options.executors << " agree with the reference"
              << (options.gradients ? ", and the derivatives with finite differences" : "") << "\n";
    return 0;
  }
  for (const Failure& failure : failures) std::cout << failure.to_string() << "\n";
  report(fuzz_case, failures.front(), options.replay, options);
  return 1;
}

// ---- Fuzzing ----

// One batch: its graphs, merged into one, and the merged graph's check.
struct Batch {
  std::int64_t first = 0, last = 0;  // graph indices [first, last)
  std::vector<FuzzCase> cases;
  std::vector<std::size_t> owner;  // per output of `merged`, its case
  FuzzCase merged;
  std::vector<Failure> failures;
  GeneratorStatistics statistics;
  CheckTimes times;
  double generating = 0;
  std::string dump;
  // --gradients: the cases whose derivatives were checked (the others are left out of `merged`), their failures
  // against finite differences, and the hazards replaced and cases skipped, by kind.
  std::vector<bool> checked;
  std::vector<std::pair<std::size_t, Failure>> case_failures;
  std::map<std::string, std::int64_t> gradient_hazards;
  std::int64_t without_float_path = 0;
};

// Gradient mode's batch: each case made free of gradient hazards (with a random stream of its own, so that graph
// i of a seed is checked the same way in any batch), checked against finite differences alone, then the checked
// cases merged for the executors (one JIT compile), whose gradients are those of each case alone.
void run_gradient_batch(const Options& options, Batch& batch) {
  std::vector<FuzzCase> checked;
  for (std::size_t c = 0; c < batch.cases.size(); ++c) {
    FuzzCase& fuzz_case = batch.cases[c];
    const bool float_path = has_float_path(fuzz_case);
    batch.without_float_path += float_path ? 0 : 1;
    RandomSource random(options.seed ^ 0x6772616469656e74ULL, static_cast<std::uint64_t>(batch.first) + c);
    batch.checked.push_back(float_path && remove_gradient_hazards(fuzz_case, random, batch.gradient_hazards));
    if (!batch.checked.back()) continue;
    set_crash_context(describe(fuzz_case));
    for (Failure& failure : check_finite_differences(fuzz_case, {options.check, nullptr}))
      batch.case_failures.emplace_back(c, std::move(failure));
    checked.push_back(fuzz_case);
  }
  batch.merged = merge(checked, "fuzz_" + std::to_string(options.seed) + "_" + std::to_string(batch.first), nullptr);
  set_crash_context("(seed " + std::to_string(options.seed) + ", graphs " + std::to_string(batch.first) + ".." +
                    std::to_string(batch.last - 1) + ", derivatives)\n" + describe(batch.merged));
  if (!checked.empty())
    batch.failures = check_derivative_executors(batch.merged, {options.check, nullptr}, &batch.times);
}

void run_batch(const Options& options, Batch& batch) {
  auto start = std::chrono::steady_clock::now();
  for (std::int64_t index = batch.first; index < batch.last; ++index) {
    batch.cases.push_back(
        generate_graph(options.seed, static_cast<std::uint64_t>(index), options.generator, &batch.statistics));
    if (options.dump) batch.dump += "# graph " + std::to_string(index) + "\n" + describe(batch.cases.back());
  }
  batch.generating = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.gradients) return run_gradient_batch(options, batch);
  batch.merged = merge(batch.cases, "fuzz_" + std::to_string(options.seed) + "_" + std::to_string(batch.first),
                       &batch.owner);
  set_crash_context("(seed " + std::to_string(options.seed) + ", graphs " + std::to_string(batch.first) + ".." +
                    std::to_string(batch.last - 1) + ")\n" + describe(batch.merged));
  batch.failures = check(batch.merged, options.check, &batch.times);
}

// Finds the graphs at fault in a failing batch -- the owner of a mismatching
// output, else each graph that fails alone -- and reports each. Returns how
// many failures it reported.
int report_batch(const Options& options, const Batch& batch) {
  std::vector<std::pair<std::int64_t, Failure>> culprits;
  for (const auto& [c, failure] : batch.case_failures) {
    bool seen = false;
    for (const auto& culprit : culprits) seen = seen || culprit.first == batch.first + static_cast<std::int64_t>(c);
    if (!seen) culprits.emplace_back(batch.first + static_cast<std::int64_t>(c), failure);
  }
  for (const Failure& failure : batch.failures) {
    if (failure.output < 0 || options.gradients) continue;  // (a merged derivative graph has no owners)
    std::int64_t index = batch.first + static_cast<std::int64_t>(batch.owner[static_cast<std::size_t>(failure.output)]);
    bool seen = false;
    for (const auto& culprit : culprits) seen = seen || culprit.first == index;
    if (!seen) culprits.emplace_back(index, failure);
  }
  if (culprits.empty() || (options.gradients && !batch.failures.empty())) {
    for (std::size_t c = 0; c < batch.cases.size(); ++c) {
      const std::int64_t index = batch.first + static_cast<std::int64_t>(c);
      bool seen = false;
      for (const auto& culprit : culprits) seen = seen || culprit.first == index;
      if (seen || (options.gradients && !batch.checked[c])) continue;
      set_crash_context(describe(batch.cases[c]));
      std::vector<Failure> alone = check_case(batch.cases[c], options.gradients, options.check);
      if (!alone.empty()) culprits.emplace_back(index, alone.front());
    }
  }
  if (culprits.empty()) {
    report(batch.merged, batch.failures.front(),
           "the batch of graphs " + std::to_string(batch.first) + ".." + std::to_string(batch.last - 1) + " of seed " +
               std::to_string(options.seed),
           options);
    return 1;
  }
  for (const auto& [index, failure] : culprits) {
    const FuzzCase& culprit = batch.cases[static_cast<std::size_t>(index - batch.first)];
    // The failure as the graph alone shows it (in the batch it may differ).
    set_crash_context(describe(culprit));
    std::vector<Failure> alone = check_case(culprit, options.gradients, options.check);
    std::string origin = "graph " + std::to_string(index) + " of seed " + std::to_string(options.seed);
    if (alone.empty())
      report(batch.merged, failure, origin + " (only in its batch)", options);
    else
      report(culprit, alone.front(), origin, options);
  }
  return static_cast<int>(culprits.size());
}

int fuzz(const Options& options) {
  auto start = std::chrono::steady_clock::now();
  GeneratorStatistics statistics;
  CheckTimes times;
  double generating = 0;
  std::int64_t graphs = 0, nodes = 0, failures_found = 0, compiles = 0;
  std::int64_t checked = 0, without_float_path = 0;      // --gradients
  std::map<std::string, std::int64_t> gradient_hazards;  // --gradients: by kind
  std::int64_t end = options.start + options.count;
  bool stop = false;
  // Rounds of `jobs` batches checked in parallel (the JIT's compiles are the
  // cost), reported in order.
  for (std::int64_t round = options.start; round < end && !stop; round += options.batch * options.jobs) {
    std::vector<Batch> batches;
    for (std::int64_t first = round; first < end && first < round + options.batch * options.jobs;
         first += options.batch) {
      batches.emplace_back();
      batches.back().first = first;
      batches.back().last = std::min(end, first + options.batch);
    }
    if (options.shrink) {
      std::int64_t round_end = std::min(end, round + options.batch * options.jobs);
      std::vector<std::string> command = {"--find-crash",
                                          "--seed",
                                          std::to_string(options.seed),
                                          "--start",
                                          std::to_string(round),
                                          "--count",
                                          std::to_string(round_end - round),
                                          "--max-nodes",
                                          std::to_string(options.generator.max_nodes)};
      for (const std::string& argument : check_arguments(options)) command.push_back(argument);
      set_crash_command(command);
    }
    // An error in one batch (an internal error of the tool) reaches main once every batch has stopped: a thread
    // still running when it unwound would end the process without a word (std::terminate).
    std::vector<std::exception_ptr> errors(batches.size());
    {
      std::vector<std::jthread> workers;
      const auto run = [&options, &batches, &errors](std::size_t b) {
        try {
          run_batch(options, batches[b]);
        } catch (...) {
          errors[b] = std::current_exception();
        }
      };
      for (std::size_t b = 1; b < batches.size(); ++b) workers.emplace_back(run, b);
      run(0);
    }
    for (const std::exception_ptr& error : errors)
      if (error) std::rethrow_exception(error);

    for (const Batch& batch : batches) {
      std::cout << batch.dump;
      for (const auto& [op, count] : batch.statistics.ops) statistics.ops[op] += count;
      statistics.rejected += batch.statistics.rejected;
      statistics.hazards_replaced += batch.statistics.hazards_replaced;
      for (const FuzzCase& fuzz_case : batch.cases) nodes += fuzz_case.graph.size();
      times.reference += batch.times.reference;
      times.standard += batch.times.standard;
      times.compile += batch.times.compile;
      times.jit_run += batch.times.jit_run;
      times.cuda_compile += batch.times.cuda_compile;
      times.cuda_run += batch.times.cuda_run;
      generating += batch.generating;
      graphs += batch.last - batch.first;
      for (bool was_checked : batch.checked) checked += was_checked ? 1 : 0;
      without_float_path += batch.without_float_path;
      for (const auto& [kind, count] : batch.gradient_hazards) gradient_hazards[kind] += count;
      ++compiles;
      if (options.verbose)
        std::cerr << "graphs " << batch.first << ".." << batch.last - 1 << ": " << batch.merged.graph.size()
                  << " nodes, " << (batch.failures.empty() ? "ok" : std::to_string(batch.failures.size()) + " failures")
                  << "\n";
      if (batch.failures.empty() && batch.case_failures.empty()) continue;
      failures_found += report_batch(options, batch);
      if (!options.keep_going) {
        stop = true;
        break;
      }
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "kiln-fuzz: seed " << options.seed << ": " << graphs << " graphs (" << nodes << " nodes, " << compiles
            << " JIT compiles, " << options.jobs << " jobs) in " << seconds << " s, "
            << (seconds > 0 ? static_cast<double>(graphs) / seconds : 0.0) << " graphs/s; "
            << statistics.hazards_replaced << " hazards replaced; " << failures_found << " failures\n";
  if (options.gradients) {
    std::int64_t replaced = 0, skipped = 0;
    for (const auto& [kind, count] : gradient_hazards) (kind.rfind("skipped: ", 0) == 0 ? skipped : replaced) += count;
    std::cout << "gradients: " << checked << " graphs checked, " << without_float_path
              << " without a float input and a float output, " << skipped << " skipped; " << replaced
              << " gradient hazards replaced\n";
    for (const auto& [kind, count] : gradient_hazards) std::cout << "  " << count << "  " << kind << "\n";
  }
  if (options.verbose) {
    std::cout << "time (all jobs): generating " << generating << " s, reference " << times.reference << " s, standard "
              << times.standard << " s, JIT compile " << times.compile << " s, JIT run " << times.jit_run
              << " s, CUDA emulation compile " << times.cuda_compile << " s, run " << times.cuda_run << " s\n";
    std::cout << "nodes per op:";
    for (const auto& [op, count] : statistics.ops) std::cout << " " << op << "=" << count;
    std::cout << "\nrejected constructions: " << statistics.rejected << "\n";
  }
  return failures_found > 0 ? 1 : 0;
}

}  // namespace
}  // namespace kiln::fuzz

int main(int argc, char** argv) {
  using namespace kiln::fuzz;
  Options options = parse_options(argc, argv);
  install_crash_handlers();
  try {
    if (options.find_crash) return find_crash(options);
    return options.replay.empty() ? fuzz(options) : replay(options);
  } catch (const std::exception& error) {
    std::cerr << "kiln-fuzz: internal error: " << error.what() << "\ncontext:\n" << crash_context();
    return 1;
  }
}
