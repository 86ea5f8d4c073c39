#pragma once
// B operands that stay unchanged for a while, packed once (kernels/cpu/gemm.h). sgemm packs op(B) into micro-panels
// on every call; inside a loop, a product with a captured weight (an RNN step's h W) repacks the same matrix at every
// step, which measured a third of a GRU step's time at batch 64 (perf: pack_b_micro_panel 32%, the microkernel 48%).
// A loop runner (exec/control_flow.cpp) opens a scope naming the memory that its captured inputs occupy, which
// nothing writes while the loop runs; while the scope lives on this thread, sgemm packs a B that lies within it once,
// for all of its column panels and K blocks, and later calls with the same B and plan read that packing.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

namespace kiln::runtime {
class Buffer;
}

namespace kiln::kernels::cpu {

// What a packing of B depends on: where B is and how it is read, and the plan's blocking of it.
struct PackedOperandKey {
  const float* b = nullptr;
  std::int64_t ldb = 0;
  bool transpose_b = false;
  std::int64_t n = 0, k = 0, panel_columns = 0, depth_block = 0;
  friend auto operator<=>(const PackedOperandKey&, const PackedOperandKey&) = default;
};

class InvariantOperands {
 public:
  // `ranges`: memory that nothing writes while the scope lives. Scopes nest (an inner loop's captures); sgemm
  // consults the innermost.
  explicit InvariantOperands(std::vector<std::span<const std::byte>> ranges);
  ~InvariantOperands();
  InvariantOperands(const InvariantOperands&) = delete;
  InvariantOperands& operator=(const InvariantOperands&) = delete;

  // This thread's innermost scope, or null.
  static InvariantOperands* current();

  // Whether [begin, begin + bytes) lies within one of the ranges.
  bool contains(const void* begin, std::size_t bytes) const;

  // The packing stored under `key`, or null.
  const float* find(const PackedOperandKey& key) const;
  // Room for the packing of `key`, `floats` floats that the caller fills before anything reads them. Null once the
  // scope holds kMaxPackings (B read in place from memory that only looks invariant, such as a sequence a capture
  // also holds, would otherwise take a packing per step): the caller then packs as usual.
  static constexpr std::size_t kMaxPackings = 16;
  float* add(const PackedOperandKey& key, std::size_t floats);

 private:
  std::vector<std::span<const std::byte>> ranges_;
  std::map<PackedOperandKey, std::shared_ptr<runtime::Buffer>> packings_;
  InvariantOperands* enclosing_;
};

}  // namespace kiln::kernels::cpu
