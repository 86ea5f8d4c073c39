#include "compiler/fusion_decision.h"

#include "ir/printer.h"

namespace kiln::compiler {

namespace {

// The n-th number of a decision, or 0 when it has fewer.
std::int64_t number(const FusionDecision& decision, std::size_t n) {
  return n < decision.numbers.size() ? decision.numbers[n] : 0;
}

// The n-th value of a decision, named as notes name nodes.
std::string value(const ir::Graph& graph, const FusionDecision& decision, std::size_t n) {
  return n < decision.values.size() ? describe(graph, decision.values[n]) : std::string("?");
}

// "axis 2", "axes 1 and 2", "axes 0, 1 and 2".
std::string axes(const std::vector<std::int64_t>& list) {
  std::string text = list.size() == 1 ? "axis " : "axes ";
  for (std::size_t i = 0; i < list.size(); ++i)
    text += (i == 0 ? "" : i + 1 == list.size() ? " and " : ", ") + std::to_string(list[i]);
  return text;
}

// Why a fused producer joined: the sentence after "fused %7 exp: ".
std::string fused_because(const FusionDecision& decision) {
  switch (decision.reason) {
    case Reason::same_size:
      return "elementwise producer of the same size";
    case Reason::per_row:
      return "one value per row, computed once per row";
    case Reason::broadcast:
      return "broadcast into the kernel's space, recomputed where read (" + std::to_string(number(decision, 0)) +
             " flops/element)";
    case Reason::row_reduction:
      return "its consumers are computed row by row in the same kernel";
    case Reason::another_reduction:
      return "another reduction over the same rows (one more pass over each row)";
    case Reason::column_consumers:
      return "its consumers are computed in the same kernel, in a pass over each block of columns after it";
    case Reason::column_reduction:
      return "a reduction over the " + std::to_string(number(decision, 0)) +
             " axes before the last, computed a block of columns at a time as its input is computed";
    case Reason::epilogue_reduction:
      return "reduction of the epilogue, accumulated tile by tile";
    case Reason::epilogue:
      return "matmul with its consumers as the epilogue, computed tile by tile while each tile is in cache";
    case Reason::in_its_piece:
      return "an operand of a concat read piecewise, computed once per element in its piece of the space";
    default:
      break;
  }
  return "?";
}

// Why a producer was refused: the sentence after "not fused: %7 exp into kernel of %9 div: ".
std::string refused_because(const ir::Graph& graph, const FusionDecision& decision) {
  switch (decision.reason) {
    case Reason::library_consumer:
      return "library kernels take no fused producers";
    case Reason::view_consumer:
      return "the reshape is a view of its operand's buffer, which the operand's kernel writes in its shape";
    case Reason::matmul_operand:
      return "the matmul reads its operands from memory";
    case Reason::layout_change:
      return "a reshape in that kernel changes the layout of its values";
    case Reason::output_layout:
      return "it is an output laid out differently from the kernel's iteration space";
    case Reason::output_smaller:
      return "it is an output smaller than the kernel's iteration space";
    case Reason::output_shape:
      return "it is an output of a different shape than the kernel's iteration space";
    case Reason::recompute_cost:
      return "it would be recomputed " + std::to_string(number(decision, 0)) + " times (" +
             std::to_string(number(decision, 1)) + " flops/element)";
    case Reason::reduced_axes_unsupported:
      return "it reduces axes that are neither the trailing ones nor a run before the last";
    case Reason::partial_epilogue_reduction:
      return "a GEMM epilogue fuses only full reductions of the matmul's shape";
    case Reason::different_axes:
      return "it reduces a different set of axes than the kernel";
    case Reason::different_space:
      return "its input's shape differs from the kernel's iteration space";
    case Reason::read_elsewhere:
      return "its consumers read it at " +
             (decision.maps.empty() ? std::string("?") : to_string(decision.maps.front())) +
             ", and the kernel has each of its values only at " +
             (decision.maps.size() < 2 ? std::string("?") : to_string(decision.maps[1])) + ", while computing that row";
    case Reason::outputs_not_stored:
      return "the kernel writes " + value(graph, decision, 0) +
             ", which a kernel of the reduction's loop nest would have no place to store";
    case Reason::generated_gemm_unsupported:
      return "the generated GEMM handles f32 matmuls (and bf16 ones in AMX tiles or on a GPU, f16 on a GPU) with a 2-D "
             "right operand";
    case Reason::product_shape:
      return "the consumers iterate over a different shape";
    case Reason::second_product:
      return "the kernel computes another matmul's product";
    case Reason::epilogue_partial_reductions:
      return "a GEMM epilogue fuses only full reductions";
    case Reason::not_product_size:
      return value(graph, decision, 0) + " does not have the matmul's shape";
    case Reason::product_epilogue_reduction:
      return "it reduces the whole product of " + value(graph, decision, 0) +
             ", which the GEMM's epilogue accumulates tile by tile; its scalar consumers run after, in a kernel of "
             "their own";
    case Reason::reads_full_reduction:
      return value(graph, decision, 0) + " reads " + value(graph, decision, 1) +
             ", a reduction of the whole product, complete only after the epilogue's last tile";
    case Reason::moved_product:
      return "the consumers read the product at other elements' positions (a transpose of a square product), and "
             "an epilogue reads only the element it computes";
    case Reason::gathered_from_memory:
      return "that kernel reads it where it lies in memory";
    case Reason::padded_in_memory:
      return "that kernel reads it through its padding, where it lies in memory: the padded value is never written";
    case Reason::padding_unsupported:
      return "the kernel reads a padded value in place, which only loop, column and (on the CPU) GEMM kernels do";
    case Reason::attention_output:
      return "it is read elsewhere too, and an attention kernel writes nothing but its second product";
    case Reason::pieces_unsupported:
      return "the kernel reads a concat piecewise, running its space as boxes, which only loop kernels do";
    case Reason::gather_unsupported:
      return "this kind of kernel does not read through take_along_axis's indices";
    case Reason::no_rule:
      return "no fusion rule for this op";
    default:
      break;
  }
  return "?";
}

}  // namespace

bool is_fused(Reason reason) { return reason >= Reason::same_size && reason <= Reason::in_its_piece; }

bool is_refusal(Reason reason) { return reason >= Reason::library_consumer && reason <= Reason::no_rule; }

std::string describe(const ir::Graph& graph, ir::ValueId value) {
  return "%" + std::to_string(value) + " " + std::string(ir::name(graph.node(value).op));
}

std::string describe(const ir::Graph& graph, const FusionDecision& decision) {
  const std::string subject = decision.subject >= 0 ? describe(graph, decision.subject) : std::string("?");
  if (is_fused(decision.reason)) {
    std::string text = "fused " + subject + ": " + fused_because(decision);
    if (!decision.text.empty()) text += "; " + decision.text;
    return text;
  }
  if (is_refusal(decision.reason))
    return "not fused: " + subject + " into kernel of " +
           (decision.kernel >= 0 ? describe(graph, decision.kernel) : std::string("?")) + ": " +
           refused_because(graph, decision);
  switch (decision.reason) {
    case Reason::recomputed:
      return "recomputed " + subject + " in each of the " + std::to_string(number(decision, 0)) +
             " kernels that read it: " + std::to_string(number(decision, 1)) + " flop/element from " +
             (decision.values.empty() ? std::string("smaller values") : value(graph, decision, 0)) +
             ", cheaper than writing it to memory and reading it back";
    case Reason::merged_consumers:
      return "merged with kernel of " + value(graph, decision, 0) + ": both consume " + subject +
             " over the same space (multi-output fusion)";
    case Reason::merged_siblings:
      return "merged sibling kernel of " + value(graph, decision, 0) + ": same iteration space, reads " + subject +
             " too (multi-output fusion)";
    case Reason::transposed_by_strips:
      return "reads the input of " + subject + " by strips: tiles transposed in registers";
    case Reason::view:
      return "a reshape of a value in memory: its buffer, read with the new shape; nothing is copied";
    case Reason::padding_in_place: {
      const std::string constant =
          decision.values.size() > 1 ? ir::format_constant(graph.node(decision.values[1])) : std::string("?");
      return "reads " + subject + " (" + value(graph, decision, 0) + " padded along " + axes(decision.numbers) +
             " with " + constant +
             ") in place: the constant where its index map falls on the padding; the padded value is never written";
    }
    case Reason::read_piecewise:
      return "reads " + subject + " piecewise: its " + std::to_string(number(decision, 1)) +
             " operands where it has them along axis " + std::to_string(number(decision, 0)) + ", the space run as " +
             std::to_string(number(decision, 2)) + " boxes, each reading one operand; the concat is never written";
    case Reason::gathered_operand: {
      std::string sources;
      for (ir::ValueId source : decision.values) sources += (sources.empty() ? "" : ", ") + describe(graph, source);
      return "gathers " + subject + " (" + std::to_string(number(decision, 0)) + " parts) from " + sources +
             (number(decision, 1) != 0 ? ", with zeros where the parts fall outside it (padding)," : "") +
             " as the GEMM packs its rows: the operand is never written";
    }
    case Reason::placed_in_concat:
      if (decision.numbers.size() > 2 && number(decision, 2) != 0)
        return "places " + subject + " in " + value(graph, decision, 0) + " at " + std::to_string(number(decision, 0)) +
               " along axis " + std::to_string(number(decision, 1)) +
               ": the kernels computing its operands write them there; it has no buffer of its own";
      return "writes " + subject + " into " + value(graph, decision, 0) + " at " + std::to_string(number(decision, 0)) +
             " along axis " + std::to_string(number(decision, 1)) + ", where the concat has it";
    case Reason::assembled: {
      std::string names;
      for (ir::ValueId placed : decision.values) names += (names.empty() ? "" : ", ") + describe(graph, placed);
      return "assembled in place: " + names + " written into it by the kernels that compute them" +
             (number(decision, 0) == 0 ? std::string("; nothing is left to copy")
                                       : std::string("; the rest is copied"));
    }
    case Reason::attention:
      return "fused " + subject + " and " + value(graph, decision, 0) + " around the row kernel: the scores " +
             (decision.values.size() > 1 ? graph.type(decision.values[1]).to_string() : std::string("?")) +
             " are computed a strip of rows at a time and never written to memory";
    case Reason::attention_epilogue:
      return "the epilogue of " + subject + ", whose matmul joined an attention kernel, reads its product from memory";
    case Reason::consumers_in_kernels:
      return "not fused: " + subject + " has consumers in " + std::to_string(number(decision, 0)) +
             " kernels; it is computed once and written to memory rather than recomputed (" +
             std::to_string(number(decision, 1)) + " flops/element)" +
             (decision.text.empty() ? std::string() : ": " + decision.text);
    case Reason::attention_refused:
      return "not fused into an attention kernel: " + subject + ", " + value(graph, decision, 0) +
             " and the row kernel between them: " + decision.text;
    case Reason::library:
      return "library: " + subject + " runs its standard kernel (" + decision.text + ")";
    default:
      break;
  }
  return "?";
}

}  // namespace kiln::compiler
