#pragma once
// Why the fusion scheduler did what it did, as records: a reason and the values and numbers it names. The
// `fused` stage prints each as a sentence (describe); tests assert the records (XLA's FusionDecision).

#include "compiler/loop_nest.h"
#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

enum class Reason {
  // A producer joined a kernel ("fused %7 exp: ...").
  same_size,           // an elementwise producer of the kernel's size
  per_row,             // one value per kept coordinate, computed once per row
  broadcast,           // numbers: flops/element; recomputed wherever the kernel reads it
  row_reduction,       // a reduction whose consumers the kernel computes row by row
  column_consumers,    // a column reduction whose consumers the kernel computes in a later pass
  another_reduction,   // a reduction over the same rows: one more pass over each row
  column_reduction,    // numbers: reduced axes; a reduction over axes before the last, a block of columns at a time
  epilogue_reduction,  // a full reduction of a GEMM epilogue, accumulated tile by tile
  epilogue,            // a matmul whose consumers are its epilogue
  in_its_piece,        // an operand of a concat read piecewise, computed in the boxes where the concat is it
  // A note on a kernel.
  recomputed,  // values: the array of its size it is recomputed from, if any; numbers: kernels, flops/element of it
               // and the producers recomputed with it: a cheap producer recomputed in each kernel reading it
  merged_consumers,      // values: the other kernel's first member; both consume `subject` over one space
  merged_siblings,       // values: the other kernel's first member; siblings reading `subject`
  transposed_by_strips,  // a strided transpose read by tiles transposed in registers
  view,                  // a reshape of a value in memory: its buffer with the new shape
  padding_in_place,      // values: the padded value, its constant; numbers: the padded axes
  read_piecewise,        // numbers: the concat's axis, its operands, the boxes the kernel's space runs as
  gathered_operand,      // the GEMM's left operand (a concat of views); values: its sources; numbers: parts, padded
  placed_in_concat,      // values: the concat; numbers: offset, axis, whether the subject is a concat placed whole
  assembled,             // values: the operands placed; numbers: whether some are still copied
  attention,             // values: the second matmul, the scores
  attention_epilogue,    // the epilogue of a matmul that joined an attention kernel, now a loop kernel
  // A producer refused by a kernel ("not fused: %7 exp into kernel of %9 div: ...").
  library_consumer,             // library kernels take no fused producers
  view_consumer,                // the consumer is a view of its operand's buffer
  matmul_operand,               // a matmul reads its operands from memory
  layout_change,                // a reshape in the kernel changes the layout of its values
  output_layout,                // an output laid out differently from the space
  output_smaller,               // an output smaller than a loop kernel's space
  output_shape,                 // an output of another shape
  recompute_cost,               // numbers: times, flops/element
  reduced_axes_unsupported,     // the reduced axes are neither trailing nor before the kept last axis
  partial_epilogue_reduction,   // a GEMM epilogue fuses only full reductions of the product
  different_axes,               // another set of reduced axes than the kernel's
  different_space,              // its input's shape differs from the kernel's space
  read_elsewhere,               // maps: where a consumer reads it, where the kernel has it
  outputs_not_stored,           // values: a member the kernel writes, which the reduction's nest cannot store
  generated_gemm_unsupported,   // the generated GEMM handles f32 matmuls with a 2-D right operand
  product_shape,                // the consumers iterate over another shape than the product's
  second_product,               // the kernel computes another matmul's product
  epilogue_partial_reductions,  // the kernel reduces part of its space
  not_product_size,             // values: a member not of the product's size
  reads_full_reduction,         // values: the member reading, the reduction
  product_epilogue_reduction,   // values: the matmul; a full reduction of a product left to the GEMM's epilogue
  moved_product,                // the consumers read the product at other elements' positions
  gathered_from_memory,         // the kernel reads it where it lies in memory (take_along_axis, a GEMM's views)
  padded_in_memory,             // the kernel reads it through its padding, where it lies in memory
  padding_unsupported,          // the kernel reads a padded value in place, which only loop, column and GEMM kernels do
  pieces_unsupported,           // the kernel reads a concat piecewise, in boxes, which only loop kernels do
  attention_output,             // an attention kernel writes its second product only; the value would be written
  gather_unsupported,           // the kernel's template does not read through take_along_axis's indices
  no_rule,                      // no fusion rule for this op
  // A value computed once and written (not fused, consumers in several kernels).
  consumers_in_kernels,  // numbers: kernels, flops/element; text: why it is not recomputed
  // A three-kernel attention candidate refused.
  attention_refused,  // values: the first and second matmuls; text: why
  // A node run by its standard kernel ("library: %9 take_along_axis runs its standard kernel (...)").
  library,  // text: why
};

struct FusionDecision {
  Reason reason = Reason::no_rule;
  ir::ValueId subject = -1;  // the node decided about
  ir::ValueId kernel = -1;   // a refusal's kernel, by its first member
  // Default member initializers on every field: GCC 12 then accepts designated initializers that name only some.
  std::vector<ir::ValueId> values{};
  std::vector<std::int64_t> numbers{};
  std::vector<IndexMap> maps{};
  std::string text{};  // what only words can say: a library kernel's reason

  friend bool operator==(const FusionDecision&, const FusionDecision&) = default;
};

// Whether the decision says a producer joined a kernel.
bool is_fused(Reason reason);
// Whether it says a producer was refused by a kernel.
bool is_refusal(Reason reason);

// The decision as the `fused` stage prints it: "fused %7 exp: elementwise producer of the same size".
std::string describe(const ir::Graph& graph, const FusionDecision& decision);

// How fusion notes name a node: "%3 matmul".
std::string describe(const ir::Graph& graph, ir::ValueId value);

}  // namespace kiln::compiler
