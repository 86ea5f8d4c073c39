#pragma once
// The CPU generator of loop, reduction, column, gemm and attention kernels (private to codegen/cpu). One
// RowKernel writes one fused kernel: row_kernel.cpp plans it (instances, layout, passes) and writes its entry
// point; row_walk.cpp writes the walk over rows of loop and reduction kernels, column_kernel.cpp and
// gemm_kernel.cpp their own kinds.

#include "compiler/codegen/cpu/kernel_state.h"
#include "compiler/codegen/reduction.h"
#include "compiler/fusion.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::compiler::cpu {

inline constexpr std::int64_t chunk_size = 16384;  // elements per work item of a long row
// A loop kernel whose rows are at most this long and that reads padding along its last row axis (a depthwise
// convolution or a pool: one image position per row) walks that axis in a middle loop instead: each row's setup
// -- its coordinates, and a condition and a pointer per tap -- is then paid once per image row, the conditions
// along the axis once per step.
inline constexpr std::int64_t middle_loop_row_bytes = 1024;
// ... when at least this many rows are left to share among the threads.
inline constexpr std::int64_t middle_loop_min_rows = 64;
// The most lanes a generated vector has (the prelude's `lanes`: 16 with AVX-512, 8 with AVX2, 4 else). A
// loop whose every range is a multiple of this many elements never has a partial vector at its end, and
// leaving out that last step keeps the body from being compiled twice: with a transcendental in it, the
// second copy cost a fifth of the module's compile time (gelu's erf form: 0.35 -> 0.28 s).
inline constexpr std::int64_t widest_lanes = 16;
static_assert(chunk_size % widest_lanes == 0);
// Where its body is cheap, a column kernel walks its rows this many at a time, taking each vector of columns down
// the group's rows before the next: the hardware sees that many streams at once (one row's 4 KiB segment at a
// time, a new page each, left the memory idle between them), and each column's accumulator stays in a register
// for the group. The order of every column's sum is the same. Reducing the squares of 4096^2 floats over axis
// 0: 2.5 -> 1.65 ms, the row kernel's 1.4 on the same data (Zen 4, 2 threads). A body with a transcendental is
// bound by its arithmetic, and ran slower grouped (a mean over tokens of a gelu: 1.55 -> 1.8-2.2 ms).
inline constexpr std::int64_t column_row_group = 8;
// How many blocks a column kernel splits its `reduced` rows into, where its other axes and blocks of columns give
// `other_items` work items (column_kernel.cpp): blocks of at least 64 rows, enough for about 16 items, and of at
// most 512 rows (a float sum's rounding errors grow with the terms folded one after another: a block's rows are
// summed in order, then the blocks' partials, so a column of n rows sees about 512 + n / 512 of them instead of n).
std::int64_t column_row_blocks(std::int64_t reduced, std::int64_t other_items);
// Whether a GEMM kernel's product is written by the GEMM itself (sgemm's C): f32 ones are. gemm_bf16 writes no C:
// its epilogue rounds the f32 sums to the product's bf16 and stores the product where it is an output.
inline bool gemm_writes_product(const ir::Node& matmul) { return matmul.type.dtype != DType::bf16; }
// Element outputs of a kernel that add up to this many bytes are written with
// non-temporal stores (store_streaming): far larger than the L2 caches, they
// would be evicted before anyone reads them, and a plain store first reads
// each destination line (measured on a 4096x4096 softmax: 15-20% faster).
inline constexpr std::int64_t streaming_bytes = std::int64_t{16} << 20;
// A kernel's element outputs that the function returns and no later kernel reads are written the same way where
// they add up to returned_streaming_bytes and the function returns streaming_bytes or more in all: results that
// large leave the caches before the caller reads them, so reading each line before writing it buys nothing.
// mlp-train's weight-gradient GEMMs (Adam's three 4 MiB results each, in their epilogue, 36 MiB returned in all):
// 2.8-3.0 -> 2.3 ms a kernel, the step 10% faster. A function whose one result the next call reads at once (y =
// f(y), an elementwise f): 4 MiB 0.144 -> 0.192 ms streamed, 8 MiB 0.37 either way, 12 MiB 0.59 -> 0.54.
inline constexpr std::int64_t returned_streaming_bytes = std::int64_t{4} << 20;
// Hoisted values (RowKernel::choose_hoisted): the rows a kernel needs so that each thread's range has several, and
// the most bytes their buffers take together (of a work range's L2; a 4096-wide row of f32 is 16 KiB).
inline constexpr std::int64_t hoist_min_rows = 16;
inline constexpr std::int64_t hoist_max_bytes = std::int64_t{64} << 10;

// A generated reduction (codegen/reduction.h) in the prelude's names.
struct ReductionInfo {
  std::string combine;   // prelude function folding a vector into the accumulator
  std::string finish;    // horizontal reduction of the accumulator
  std::string identity;  // the accumulator's start value
};

// The prelude functions and start value of a generated reduction (throws CompileError for other ops).
ReductionInfo reduction_info(ir::Op op, DType dtype);

class RowKernel {
 public:
  explicit RowKernel(KernelEmitter& emitter) : emitter_(emitter), kernel_(emitter.kernel()) {}

  std::string emit();

 private:
  const Instance& at(int id) const { return emitter_.at(id); }

  void build_instances();

  // Outputs written once per row (the plan's row_outputs): reductions (even over size-1 axes, whose result has the
  // space's shape) and values of the kept axes' shape.
  bool is_row_output(ir::ValueId value) const;

  // Where an output's elements go: element outputs have the space's shape; per-row outputs follow the nest's kept
  // axes (output_map). A placed output (fusion_placement.cpp) is an element output stored where the value it is placed
  // into has it.
  Linear output_address(ir::ValueId value) const;

  // The outputs stored at every point of the space (not is_row_output), and their bytes together.
  std::vector<ir::ValueId> element_outputs() const;
  std::int64_t element_output_bytes() const;
  // Sets streamed_ from `outputs`, the element outputs the kernel stores itself: all of them where they add up to
  // streaming_bytes, else those the function returns and no later kernel reads, where those add up to
  // returned_streaming_bytes and the function's results to streaming_bytes (bool outputs never: their stores are
  // byte-wide).
  void choose_streamed(const std::vector<ir::ValueId>& outputs);
  // Whether the function returns `value` and no node outside this kernel reads it.
  bool returned_only(ir::ValueId value) const;

  // The loads of the first pass whose next row follows their row in memory
  // (worth prefetching during the later passes; see prefetch_row_bytes).
  std::vector<int> next_row_loads() const;

  // Prefetches of the next row's element `j` of each load in `loads`, into L1
  // during the last pass and into L2 before it.
  std::string prefetch_next_row(const std::vector<int>& loads, bool last_pass) const;

  // Prefetches `prefetch_ahead_bytes` ahead of element `j` of each large,
  // contiguous input of a loop kernel (see prefetch_ahead_input_bytes).
  std::string prefetch_ahead(const std::set<int>& needed) const;

  bool computes_transcendental(const std::set<int>& elements) const;

  bool only_reduction_outputs() const;

  // Rows across lanes (see lanes_row_limit and lanes_row_limit_with_comparisons): a group of `lanes` consecutive
  // rows at a time, row `row + l` in lane l, the inner loop one element of every row per step. Each buffer's rows
  // must lie a fixed stride apart (one collapsed row axis) and the row walk plain (no middle loops).
  bool rows_across_lanes() const;

  // Across lanes: how far apart consecutive rows' elements lie in the buffer `linear` addresses.
  std::int64_t row_stride(const Linear& linear) const;

  // Across lanes: " + j * <step>", where element j of the row lies from its start in the buffer `linear` addresses.
  std::string element_offset(const Linear& linear) const;

  // Across lanes: the group's elements at `base` (row `row + l` at base + l * stride), as one vector.
  static std::string read_across_lanes(const std::string& type, const std::string& base, std::int64_t stride);

  static std::string write_across_lanes(const std::string& type, const std::string& base, std::int64_t stride,
                                        const std::string& value);

  void mark_varying();

  bool varying(int id) const { return varying_[static_cast<std::size_t>(id)]; }

  // The varying instances `root` needs, stopping at row values and at
  // instances cached in `cached`.
  void collect_elements(int root, const std::set<int>& cached, std::set<int>& needed) const;

  void plan_phases();

  // ---- values every row computes alike (hoisted) ------------------------------------------------------------
  // A value that varies along the inner loop but is computed from inputs that every row reads at the same elements
  // (a layer_norm's bf16 scale and offset widened to f32, a bias scaled) is computed once per work range, at its
  // first row, into a buffer one row long, which every row then loads: a bf16 layer_norm spent a sixth of its
  // instructions widening its scale and offset again for each row. (The planner fuses only cheap values of such
  // inputs; an exp of a bias has a kernel of its own.) Chosen for loop and reduction kernels whose rows are walked
  // one at a time without middle loops or chunks, with at least hoist_min_rows rows, where the buffers fit
  // hoist_max_bytes: the computed values (not loads) that a value depending on the row, or an output, reads.
  void choose_hoisted();
  // The block that fills the hoisted buffers, at the first row of a work range.
  std::string fill_hoisted() const;

  void collect_with_cache(int root, const std::set<int>& written, std::set<int>& needed) const;

  // The phase after which a row value can be computed (0: at the row's start).
  int ready_phase(int id) const;

  std::string coordinates() const { return digits(layout_.outer_sizes, "row", "c", "    "); }

  // `<prefix>0, <prefix>1, ...`: the digits of `variable` in the mixed radix of `sizes`, the last the fastest.
  static std::string digits(const std::vector<std::int64_t>& sizes, const std::string& variable,
                            const std::string& prefix, const std::string& indent);

  std::string pointer(const Instance& item) const { return "row_" + item.name; }

  // Per-row setup: pointers of loads and outputs.
  std::string row_setup() const { return coordinates() + row_setup_pointers(); }

  std::string row_setup_pointers() const;

  // Row values that become computable after `phase` passes (with `shared_only`, those that do not depend on the
  // row: a group's, row_groups.cpp).
  std::string row_values(int phase, bool shared_only = false) const;

  // Whether instance `id` divides a varying value by a per-row result of the passes (softmax's sum, layer_norm's
  // deviation): it then multiplies by the divisor's reciprocal, computed once per row, where that reciprocal is
  // a normal number (prelude: divide_by_row_value). A vector division costs ~10 cycles against a multiply's 1
  // (a 512-wide attention kernel spent ~2 ms of its 7 ms of row work dividing); x * (1 / s) is within two
  // roundings of x / s, and PyTorch's softmax and layer_norm do the same. Divisions by constants and inputs
  // stay divisions.
  bool divides_by_reciprocal(int id) const;
  // Whether compute instance `id` is an f32 exp of x minus a maximum of x kept along the reduced axes (softmax's,
  // logsumexp's): its argument is <= 0 or NaN, and exp_of_nonpositive gives exp's bits with one instruction fewer.
  bool exponent_is_nonpositive(int id) const;
  // Whether reduction instance `id` is an f32 maximum whose NaN reaches every output through the exponentials'
  // sum anyway (softmax, log_softmax): it may skip NaN elements (max_skipping_nan, one vmaxps instead of two
  // compares and a masked move), and every output is as it was, bit for bit where the row holds no NaN.
  bool maximum_may_skip_nan(int id) const;

  // The reciprocal of row value `id` if a division uses it (see divides_by_reciprocal); emitted with the value.
  std::string reciprocal(int id) const;

  std::string divide_by_row_value(const Instance& division) const;

  std::string row_value(int id) const;

  // The C++ of compute instance `id` (KernelEmitter::expression), but an f32 maximum or minimum of a constant that
  // is neither NaN nor zero as maximum_of_number or minimum_of_number (the prelude's: one or two instructions where
  // the ops' own form spends four on keeping a NaN the constant cannot be; equal operands then have the same bits,
  // so the order does not matter). Not zero: maximum(-0, +0) is +0, where x < c ? c : x of c = +0 gives -0, and
  // clang compiled x < -0 ? -0 : x as x <= 0 ? -0 : x.
  std::string computed(int id) const;

  // The C++ of take_along_axis's pick (a gather instance) from `base`, its row pointer (plus the middle offset):
  // the row's one element with `inner` empty, else the vector of elements `inner`, `inner` + 1, ...
  std::string pick(const Instance& item, const std::string& base, const std::string& inner) const;

  // The body of one vector step at element `j` with `count` lanes. Hoisted values (choose_hoisted) are loaded from
  // their buffers, except `filling_hoisted`, where they are computed and stored there.
  std::string element_values(const std::set<int>& needed, int phase, bool filling_hoisted = false) const;

  // Where element `j` at the current middle-loop position lies in a row cache (across lanes: a vector each).
  std::string cache_offset() const;

  // The inner loop over [begin, end) in vectors, inside the middle loops.
  // With `partial_type`, a reduction's loop: the body folds into `partial`,
  // one of `partial_count` accumulators (`partials[]`, declared by the
  // caller) taking turns, so that consecutive vectors do not wait for each
  // other's combine (a max is a compare and a blend: ~8 cycles of latency per
  // vector with one accumulator; measured 10-15% of a 4096-wide softmax).
  std::string vector_loop(const std::string& begin, const std::string& end, const std::string& body,
                          const std::string& partial_type = "", int partial_count = 1,
                          const std::string& step_prologue = "") const;

  // vector_loop's loop over [begin, end), without the middle loops around it.
  std::string inner_vector_loop(const std::string& begin, const std::string& end, const std::string& body,
                                const std::string& partial_type, int partial_count) const;

  // Across lanes: the inner loop, element j of each of the group's rows per step.
  static std::string lanes_loop(const std::string& begin, const std::string& end, const std::string& body);

  std::string reduction_pass(std::size_t k, const std::string& begin, const std::string& end) const;
  // How many partial accumulators reduction k's pass folds its row into (1 or 4).
  int partials_of(std::size_t k) const;

  // A row value reduced over the row: each of the row's n elements is the same value v. A
  // sum is v * n, rounded once (in double for floats, as the float64 reference; n additions
  // would drift by up to n roundings: 1.3e-4 relative for 12,400 floats), added to the
  // identity as the loop would (so -0 sums to +0); a maximum or minimum is v; a product
  // multiplies n times.
  std::string invariant_reduction(std::size_t k, const std::string& begin, const std::string& end) const;

  std::string finish_reduction(std::size_t k, const std::string& accumulator) const;

  std::string emit_kernel();

  // Row buffers of the values cached between passes (plan_phases), one row long, per call of the items
  // function.
  std::string allocate_row_caches() const;

  // The row caches carved out of the attention driver's per-thread `scratch`, each 64-byte aligned; `bytes`
  // receives the total the driver must provide.
  std::string row_caches_in_scratch(std::int64_t& bytes) const;

  std::string release_row_caches() const;

  // One pass over the row per reduction, in order, each followed by the row values it makes computable (a
  // split reduction's pass stores its chunk's partial result instead).
  std::string reduction_passes(const std::string& begin, const std::string& end) const;

  std::string element_pass(const std::string& begin, const std::string& end) const;

  // The store of element output `value` (instance `id`) at element `j` of the row, streaming past the caches
  // where choose_streamed chose it.
  std::string element_store(ir::ValueId value, int id) const;

  std::string row_outputs() const;

  // The opening of the kernel's extern "C" entry point, up to its state filled from `buffers`.
  std::string entry_opening() const;

  // The first line of a callback that receives the kernel's state as its `context`.
  std::string state_from_context() const;

  // The state field holding kernel input `value`.
  std::string input_field(ir::ValueId value) const;

  std::string entry(std::int64_t chunks) const;
  // A box's (KernelEmitter::piece): a setup function that fills its state from `buffers` and returns its item
  // count, which the kernel's entry point (piece_entry) runs.
  std::string piece_setup(const std::string& count) const;

 public:
  // After emit(), for a box: its items in row-major order of its rows, or -1 when they are not (rows across lanes,
  // strips).
  std::int64_t piece_items() const { return piece_items_; }

 private:
  mutable std::int64_t piece_items_ = -1;

  // ---- transposed strips (transposed_strips.cpp) -------------------------------------------------------------
  // The loads of a loop kernel that read an input whose rows are the kernel's columns: their inner coefficient is
  // at least strip_stride_bytes and they are contiguous across the last row axis. Such a kernel walks groups of
  // `lanes` rows by column blocks (an item each), and first transposes each of these inputs' block into a strip
  // of rows (prelude: transpose_into_strip), which the rows then load contiguously.
  std::vector<int> strip_loads() const;
  bool reads_strip(int id) const;
  std::int64_t strip_columns() const;
  std::string strip_name(const Instance& item) const { return "strip_" + item.name; }
  // The items function of such a kernel.
  std::string strip_items() const;
  // The strips of the item's rows [first_row, first_row + group_rows) and columns [column_begin, column_end).
  std::string fill_strips() const;

  // ---- padded loads (padded_loads.cpp): padding read in place (fusion.h: padding read in place)
  // -------------------------------- The condition that the current row of load `item` reads its source: its bounds
  // along row axes (and constant ones), as "inside(2 * c1 + -1, 112) && ..."; empty without such bounds.
  std::string row_inside(const Instance& item) const;
  // The elements [begin, end) of every row where load `item`'s bounds along the inner axis hold: [0, inner_size)
  // without any, empty where none does.
  std::pair<std::int64_t, std::int64_t> inner_window(const Instance& item) const;
  // The padding's constant as a value of load `item`'s type.
  std::string padding_scalar(const Instance& item) const;
  // The condition over load `item`'s bounds along middle loops (d0, d1, ...); empty without.
  std::string middle_inside(const Instance& item) const;
  // The per-row pointer of load `item` (at the window's first element; the input's start where the row reads
  // nothing, or the padding row below), after its row condition `inside_<name>`; declares the padding row where
  // it is the first load of its type, constant and length (padding_rows_).
  std::string padded_row_setup(const Instance& item) const;
  // "constant_row<float, 64>": the type of load `item`'s padding row of `length` elements; with the constant, the
  // key under which padding_rows_ names it.
  std::string padding_row_type(const Instance& item, std::int64_t length) const;
  // The padding row load `item` reads where it falls on the padding ("padding_row_0.values"), or empty.
  std::string padding_row(const Instance& item) const;
  // Where load `item` reads the current middle step (`base`: its row pointer plus the middle offset): the padding
  // row instead where a bound along a middle loop fails and there is one.
  std::string padded_base(const Instance& item, const std::string& base) const;
  // How many elements a row of load `item` spans when the row falls on the padding as a whole or not at all (bounds
  // along row axes only) and its loads walk forward: a row of that many copies of the constant then stands in for
  // the source, and the loads need no condition. 0 where not (bounds along the inner loop, a reversed walk, a
  // row longer than kMaxPaddingRowBytes).
  std::int64_t padding_row_length(const Instance& item) const;
  // Load `item`'s vector at element j: `loaded` (its plain load from `base`, the row's pointer plus the middle
  // offset) where the row, the middle step and the window allow, lanes of the constant elsewhere.
  std::string padded_value(const Instance& item, const std::string& loaded, const std::string& base) const;
  // Whether the layout should make its last row axis a middle loop (middle_loop_row_bytes).
  bool walks_padded_rows_in_a_middle_loop() const;
  // The values that vary across the middle loop's steps but not along the inner loop (an average pool's window
  // sizes, when the width is a middle loop): computed once per step, before the inner loop (element_pass), not per
  // element -- per element an average pool ran 1.4x slower than with a row per position.
  std::set<int> per_middle_step(const Layout& layout) const;

  // ---- row groups (row_groups.cpp): rows that share what they read ------------------------------------------
  // A reduction kernel whose one reduction multiplies each row by values every row reads alike (a matrix times a
  // vector, after matrix_vector.cpp made the product a reduction) walks its rows a few at a time: each step loads
  // the shared vector once and folds it into every row of the group, each row into its own partial sums in the
  // order a row alone would use, so every result is the same to the bit whichever way its row is walked. A row at
  // a time, the product ran near one stream's rate (55 products of 2048^2 floats by a vector on two Zen 3 cores,
  // best of rounds: 10.0-13.2 ms a row at a time, 8.2-10.6 three rows at a time; docs/design-notes.md).
  bool chooses_row_groups() const;
  // Whether instance `id` differs from one row to the next (a load along a row axis, a reduction's result, or a
  // value computed from one).
  bool depends_on_row(int id) const;
  // The walk over whole groups of the work range's rows, ahead of the row loop, which takes the rows left over.
  std::string group_walk() const;
  // The loop of group_walk's steps over a row, each `partial` taking turns as in inner_vector_loop.
  std::string group_vector_loop(const std::string& body) const;

  // ---- column: a reduction over the axes before the last, a block of rows and columns at a time -------------
  // The space is [outer..., reduced..., columns]. A work item takes one index of the outer axes (row: c0, c1, ...),
  // a block of up to column_block columns and a block of the reduced rows (r, whose digits are d0, d1, ...), and
  // walks its rows in order, each row's segment contiguous, folding every element into the accumulator of its
  // column (an array in the item's stack frame). With one row block the item stores the results; with several
  // (enough items for the threads where the outer axes and the columns give few), each stores its partial
  // results, and the entry combines them in row-block order. Every column is summed in an order that depends on
  // the shape only.
  std::string emit_column();

  // ---- column kernels in passes (column_passes.cpp): several reductions, and values computed from their results --
  // A work item takes a block of columns and all its reduced rows; each pass walks those rows, folding the
  // reductions whose operands the earlier passes completed; values computed from the results (a vector per
  // `lanes` columns of the block, `column_<name>[group]`) follow each pass, and a last pass stores the element
  // outputs.
  std::string emit_column_passes();
  // Whether the column kernel needs passes: a value (a reduction's operand, an output) computed from a reduction's
  // result, or a value per column stored. (Without, its reductions fold their operands in one pass, the rows split
  // into blocks where that makes enough items.)
  bool needs_column_passes() const;
  // Whether instance `id` changes from one reduced row to the next (along the middle loops).
  bool varies_across_rows(int id) const;
  // One value per column of a column kernel, kept in an array of the block: a reduction's result, a value computed
  // from results, or an output stored per column.
  bool is_per_column(int id) const;
  // The pass that can compute instance `id`: one after the last pass of the reductions it reads.
  int column_pass(int id) const;
  // The instances computing `root` at each element of a pass (into `needed`), stopping at per-column values (into
  // `per_column`, read from their arrays), at values computed once per item, and at cached values an earlier pass
  // wrote (`written`: read from the cache).
  void collect_column_elements(int root, std::set<int>& needed, std::set<int>& per_column,
                               const std::set<int>& written = {}) const;
  // Declarations, in a step over the block's columns, of the per-column values `per_column` from their arrays (with
  // their reciprocals where elements divide by them).
  std::string per_column_values(const std::set<int>& per_column) const;
  // Whether element values divide by per-column value `id` through its reciprocal (divides_by_reciprocal).
  bool divisor_of_elements(int id) const;

  // A column accumulator as the reduction's result: a mean divides by the number of reduced elements.
  std::string finished(const std::string& accumulator, const ir::Node& node, const std::string& storage) const;

  // ---- gemm: the epilogue runs on each finished tile of the matmul -------------
  std::string emit_gemm();

  std::string epilogue(const std::string& prefix, bool writes_product, ir::ValueId matmul);
  // The table `rows` (a kiln_gathered_rows) of a gemm kernel whose left operand is gathered (fusion.h: a GEMM's
  // gathered operand).
  std::string gathered_rows(ir::ValueId operand) const;

  // ---- attention: the row kernel between two matmuls, on strips of the first product -------------
  // The runtime's attention driver (kernels/cpu/attention.h) computes the first product a strip of rows at a
  // time and calls `<prefix>_rows` on it: the row kernel's passes read the scores from the strip (`row_tile`)
  // and write P, the second matmul's left operand, to the driver's other strip.
  std::string emit_attention();

  // problem.<name>, its batch stride (0: a matrix shared by every batch item) and its transpose flag.
  std::string operand_fields(const std::string& name, ir::ValueId operand, bool transpose) const;

  KernelEmitter& emitter_;
  const FusedKernel& kernel_;
  std::vector<std::pair<ir::ValueId, int>> outputs_;  // value, instance
  Layout layout_;
  std::vector<bool> varying_;
  std::vector<int> reductions_;
  std::vector<std::set<int>> phase_elements_;
  std::set<int> cached_;
  std::set<int> hoisted_;  // values computed once per work range (choose_hoisted)
  std::vector<int> first_write_;
  bool chunked_ = false;
  bool split_reduction_ = false;
  std::set<ir::ValueId> streamed_;  // element outputs written with store_streaming (a fence ends the kernel)
  bool whole_vectors_ = false;  // every inner range's length is a multiple of widest_lanes
  bool across_lanes_ = false;   // a group of rows at a time, a row in each lane (rows_across_lanes)
  bool row_groups_ = false;     // whole groups of rows first (chooses_row_groups)
  std::set<int> step_values_;   // per_middle_step(layout_) of a loop kernel
  // The padding rows an items function declares, by type, constant and length (padded_row_setup).
  mutable std::map<std::string, std::string> padding_rows_;
  std::vector<int> strips_;        // loads read through transposed strips (strip_loads)
  std::int64_t column_block_ = 0;  // a column kernel in passes: the columns of a work item
};

}  // namespace kiln::compiler::cpu
