// The entry point of a loop kernel that reads concats piecewise (plan.h's SpaceBox): its boxes' states filled, then
// the boxes run. Where the boxes cut axes inside the rows of the space's leading axes (the rotation of rotary
// embeddings cuts the last axis in two), they run interleaved: a block of those rows at a time, each box its part
// of the block, so that what the boxes read in common (the whole row of q) is read from memory once and from the
// cache by the next box. Run one after another over the whole space, the boxes read q twice: 1.9x the time.

#include "compiler/codegen/cpu/kernel_state.h"

#include <algorithm>

namespace kiln::compiler::cpu {
namespace {

// Elements of the space per block of leading rows: what two boxes load of a block (128 KiB of floats) stays in a
// core's L2 between them, and each box's call per block (its setup, its streaming stores' fence) is amortized.
constexpr std::int64_t block_elements = 32768;

// The rows of the space's axes before the first that some box does not start at 0: every box has all of them.
std::int64_t leading_rows(const Shape& space, const std::vector<PieceCode>& boxes) {
  std::int64_t rows = 1;
  for (int axis = 0; axis < space.rank(); ++axis) {
    for (const PieceCode& box : boxes)
      if (box.origin[static_cast<std::size_t>(axis)] != 0) return rows;
    rows *= space[axis];
  }
  return rows;
}

}  // namespace

std::string piece_entry(int index, const Shape& space, const std::vector<PieceCode>& boxes) {
  const std::string name = "kernel_" + std::to_string(index);
  auto box_name = [&](std::size_t box) { return name + "_piece_" + std::to_string(box); };
  const std::int64_t rows = leading_rows(space, boxes);
  // Worth it where two boxes load one input; boxes reading apart (relu of a concat of two values) run apart.
  bool shared = false;
  for (std::size_t a = 0; a < boxes.size(); ++a)
    for (std::size_t b = a + 1; b < boxes.size(); ++b)
      for (int input : boxes[a].inputs) shared = shared || boxes[b].inputs.count(input) > 0;
  bool interleaved = rows > 1 && shared;
  for (const PieceCode& box : boxes) interleaved = interleaved && box.items > 0 && box.items % rows == 0;
  std::string text = "\nnamespace {\n\nstruct " + name + "_state {\n";
  for (std::size_t box = 0; box < boxes.size(); ++box)
    text += "  " + box_name(box) + "_state piece_" + std::to_string(box) + ";\n  int64_t items_" + std::to_string(box) +
            ";\n";
  text += "};\n\n";
  if (interleaved) {
    const std::int64_t block =
        std::max<std::int64_t>(1, block_elements / std::max<std::int64_t>(1, space.numel() / rows));
    text += "// Rows of the leading axes [begin, end), " + std::to_string(block) +
            " at a time: each box runs its items of the block's rows.\n";
    text += "void " + name + "_items(void* context, int64_t begin, int64_t end) {\n  " + name +
            "_state& state = *static_cast<" + name + "_state*>(context);\n";
    text += "  for (int64_t first = begin; first < end; first += " + std::to_string(block) + ") {\n";
    text += "    const int64_t last = first + " + std::to_string(block) + " < end ? first + " + std::to_string(block) +
            " : end;\n";
    for (std::size_t box = 0; box < boxes.size(); ++box) {
      const std::string per_row = std::to_string(boxes[box].items / rows);
      text += "    " + box_name(box) + "_items(&state.piece_" + std::to_string(box) + ", first * " + per_row +
              ", last * " + per_row + ");\n";
    }
    text += "  }\n}\n\n";
  }
  text += "}  // namespace\n\nextern \"C\" __attribute__((visibility(\"default\"))) void kiln_kernel_" +
          std::to_string(index) + "(const kiln_runtime* runtime, void* const* buffers) {\n  " + name +
          "_state state;\n";
  for (std::size_t box = 0; box < boxes.size(); ++box)
    text += "  state.items_" + std::to_string(box) + " = " + box_name(box) + "_setup(state.piece_" +
            std::to_string(box) + ", runtime, buffers);\n";
  if (interleaved)
    return text + "  runtime->parallel_for(" + std::to_string(rows) + ", 1, " + name + "_items, &state);\n}\n";
  // Boxes that are blocks of whole leading rows (or laid out otherwise): one after another.
  for (std::size_t box = 0; box < boxes.size(); ++box)
    text += "  runtime->parallel_for(state.items_" + std::to_string(box) + ", 1, " + box_name(box) +
            "_items, &state.piece_" + std::to_string(box) + ");\n";
  return text + "}\n";
}

}  // namespace kiln::compiler::cpu
