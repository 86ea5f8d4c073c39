/* The exported functions called from C, through their C headers alone (no kiln header, no C++). */

#include "layer_c.h"
#include "seed_c.h"

#include <stdio.h>

/* seed_c on its inputs into `result`; 0 when it succeeded. */
int call_seed_from_c(const float* x, const float* y, float* result) {
  if (seed_c(x, y, result) != 0) {
    fprintf(stderr, "seed_c failed: %s\n", seed_c_error());
    return 1;
  }
  return 0;
}

/* layer_c on `x` into the outputs; 0 when it succeeded. */
int call_layer_from_c(const float* x, float* probabilities, float* sorted, int64_t* labels, double* largest) {
  if (layer_c(x, probabilities, sorted, labels, largest) != 0) {
    fprintf(stderr, "layer_c failed: %s\n", layer_c_error());
    return 1;
  }
  return 0;
}

/* layer_c with a null output: must fail, saying why. Returns its message. */
const char* call_layer_with_a_null_output(const float* x) {
  float probabilities[23 * 31];
  float sorted[23 * 31];
  double largest = 0;
  if (layer_c(x, probabilities, sorted, NULL, &largest) == 0) return "";
  return layer_c_error();
}
