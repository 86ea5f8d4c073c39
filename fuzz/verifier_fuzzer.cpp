// libFuzzer target: the IR verifier on graphs built structurally from bytes
// (graph_from_bytes.h): wrong ops, dtypes, shapes, operands, attributes,
// parameter lists and outputs.
//
// Contract (src/ir/verifier.h, printer.h): find_verifier_failure and verify
// never crash, and agree (verify throws kiln::InternalError exactly when
// find_verifier_failure reports a problem); print never throws, even on a
// malformed graph. A graph that verifies prints as text that parses back to
// the same text, and stays valid when dead nodes are removed.

#include "graph_from_bytes.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

#include <kiln/error.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kiln::ir::Graph graph = kiln::fuzz::graph_from_bytes(data, size);
  std::string printed = kiln::ir::print(graph, {.locations = true});
  std::optional<kiln::ir::VerifierFailure> failure = kiln::ir::find_verifier_failure(graph);
  bool threw = false;
  try {
    kiln::ir::verify(graph);
  } catch (const kiln::InternalError&) {
    threw = true;
  }
  if (threw != failure.has_value()) fail("verify and find_verifier_failure disagree on this graph:", printed);
  if (failure) return 0;

  try {
    std::string again = kiln::ir::print(kiln::ir::parse(printed), {.locations = true});
    if (again != printed) fail("a valid graph does not round-trip through its text:", printed + "---\n" + again);
  } catch (const kiln::ParseError& error) {
    fail("a valid graph prints as text that does not parse:", printed + error.what());
  }
  kiln::ir::Graph pruned = graph;
  kiln::ir::remove_dead_nodes(pruned);
  if (auto broken = kiln::ir::find_verifier_failure(pruned))
    fail("remove_dead_nodes broke a valid graph:", printed + broken->detail);
  return 0;
}
