// libFuzzer target: the IR text parser on arbitrary bytes.
//
// Contract (src/ir/parser.h): arbitrary bytes give a graph or a
// kiln::ParseError -- never another exception, a crash, a hang, undefined
// behaviour or a leak. And a graph that parses round-trips: printing it gives
// text that parses to a graph printing the same text.

#include "ir/parser.h"
#include "ir/printer.h"

#include <kiln/error.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::ir::Graph graph;
  try {
    graph = kiln::ir::parse(text);
  } catch (const kiln::ParseError&) {
    return 0;
  }
  std::string printed = kiln::ir::print(graph, {.locations = true});
  try {
    std::string again = kiln::ir::print(kiln::ir::parse(printed), {.locations = true});
    if (again != printed) {
      std::fprintf(stderr, "round trip changed the text:\n%s\n---\n%s\n", printed.c_str(), again.c_str());
      std::abort();
    }
  } catch (const kiln::ParseError& error) {
    std::fprintf(stderr, "printed graph does not parse: %s\n%s\n", error.what(), printed.c_str());
    std::abort();
  }
  return 0;
}
