#pragma once
// Delta debugging of a failing fuzz case: repeatedly tries smaller variants
// and keeps each one that still fails, until no variant does (or the budget
// runs out). The variants, largest cuts first:
//   - keep one output, or drop one;
//   - replace a node by an operand of the same type (bypass it);
//   - replace a node by a parameter fed with the reference's value of it
//     (which cuts everything upstream and keeps downstream values);
//   - replace a parameter by a constant (its first input element);
//   - shrink a dimension of a parameter, constant or iota (to 1, half, one
//     less), retyping everything downstream (see reshape_source);
//   - in regions, which the steps above leave whole: keep one branch of a
//     cond, or bypass a node.

#include "fuzz_case.h"

#include <functional>

namespace kiln::fuzz {

// True if the candidate still fails the same way. The shrinker only offers
// verified graphs whose loops end (hazards.h: loops_end); the predicate
// should reject candidates with hazards.
using StillFails = std::function<bool(const FuzzCase&)>;

struct ShrinkOptions {
  int max_attempts = 600;      // predicate calls
  double max_seconds = 600;    // wall-clock budget
  bool verbose = false;        // report each accepted step on stderr
};

struct ShrinkStatistics {
  int attempts = 0;
  int accepted = 0;
  double seconds = 0;
};

FuzzCase shrink(FuzzCase fuzz_case, const StillFails& still_fails, const ShrinkOptions& options = {},
                ShrinkStatistics* statistics = nullptr);

}  // namespace kiln::fuzz
