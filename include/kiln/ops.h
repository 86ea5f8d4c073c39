#pragma once
// kiln's ops as free functions and C++ operators. Each primitive maps to one
// entry of the op table (src/ir/ops.def); the composites (clip, stack, split,
// pad, tile, reduce_logsumexp, reduce_variance, reduce_any, ...) are functions
// of the primitives (src/api/composite_ops.cpp), which the JIT fuses like your
// own code. Called on concrete tensors an op runs at once (eagerly) with the
// standard kernels; called inside kiln::function it records nodes in the
// graph being traced.
//
// dtype promotion (see README): binary ops compute in the larger dtype of the
// lattice bool < i32 < i64 < f32 < f64; float-only math turns bool and
// integers into f32; comparisons and logical ops give bool.

#include <kiln/tensor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

// ---- unary -------------------------------------------------------------------
Tensor neg(const Tensor& x, Location location = Location::current());
Tensor abs(const Tensor& x, Location location = Location::current());
Tensor sin(const Tensor& x, Location location = Location::current());
Tensor cos(const Tensor& x, Location location = Location::current());
Tensor exp(const Tensor& x, Location location = Location::current());
Tensor log(const Tensor& x, Location location = Location::current());
Tensor tanh(const Tensor& x, Location location = Location::current());
Tensor sqrt(const Tensor& x, Location location = Location::current());
Tensor rsqrt(const Tensor& x, Location location = Location::current());
Tensor sigmoid(const Tensor& x, Location location = Location::current());
Tensor relu(const Tensor& x, Location location = Location::current());
Tensor square(const Tensor& x, Location location = Location::current());
Tensor floor(const Tensor& x, Location location = Location::current());
Tensor ceil(const Tensor& x, Location location = Location::current());
// To the nearest integer, halfway cases to the even one: round(2.5) is 2, round(-0.5) is -0 (NumPy's np.round,
// tf.round, torch.round). Integers and bools are returned as they are.
Tensor round(const Tensor& x, Location location = Location::current());
Tensor sign(const Tensor& x, Location location = Location::current());
Tensor erf(const Tensor& x, Location location = Location::current());
// 1 - erf(x), accurate where that difference cancels (x > 0: down to 1e-45 in f32).
Tensor erfc(const Tensor& x, Location location = Location::current());
// log(1 + x), accurate where 1 + x would round x away (|x| below 1e-3 or so): log1p(1e-10) is 1e-10, not 0.
Tensor log1p(const Tensor& x, Location location = Location::current());
// e^x - 1, accurate where e^x is near 1: expm1(1e-10) is 1e-10, not 0.
Tensor expm1(const Tensor& x, Location location = Location::current());
// The arctangent, in [-pi/2, pi/2]; atan(+-inf) = +-pi/2.
Tensor atan(const Tensor& x, Location location = Location::current());
Tensor logical_not(const Tensor& x, Location location = Location::current());
// Every bit of an integer flipped (~x = -x - 1); on bools, logical_not. np.invert, tf.bitwise.invert, torch ~.
Tensor bitwise_not(const Tensor& x, Location location = Location::current());
Tensor cast(const Tensor& x, DType dtype, Location location = Location::current());

// ---- binary, with NumPy broadcasting ------------------------------------------
#define KILN_DECLARE_BINARY(name)                                                   \
  Tensor name(const Tensor& a, const Tensor& b, Location location = Location::current()); \
  Tensor name(const Tensor& a, Scalar b, Location location = Location::current());        \
  Tensor name(Scalar a, const Tensor& b, Location location = Location::current());
KILN_DECLARE_BINARY(add)
KILN_DECLARE_BINARY(sub)
KILN_DECLARE_BINARY(mul)
KILN_DECLARE_BINARY(div)
KILN_DECLARE_BINARY(pow)
// Division rounded down and its remainder, in the divisor's sign (Python's // and %, NumPy's floor_divide and
// remainder, jnp's, torch's, tf.math.floordiv and floormod): floor_divide(-7, 2) is -4 and remainder(-7, 2) is 1;
// floats as NumPy's divmod (7.0 // 0.1 is 69: 0.1 is a little above a tenth). fmod is C's remainder, in the
// dividend's sign (np.fmod, torch.fmod): fmod(-7, 2) is -1. Integers divided by 0 give 0 (as NumPy, which also
// warns); floats give inf or NaN. Bools are refused (DTypeError).
KILN_DECLARE_BINARY(floor_divide)
KILN_DECLARE_BINARY(remainder)
KILN_DECLARE_BINARY(fmod)
// The magnitude of a with the sign of b, the signs of zeros and NaNs included: copysign(1.3, -1) is -1.3,
// copysign(3, -0.0) is -3 (np.copysign, torch.copysign, jnp.copysign). Integers and bools compute in float.
KILN_DECLARE_BINARY(copysign)
// The bits of integers (two's complement), or bools (where these are logical and, or and xor); floats are refused
// (DTypeError). NumPy's, JAX's and PyTorch's bitwise_and/or/xor, tf.bitwise.
KILN_DECLARE_BINARY(bitwise_and)
KILN_DECLARE_BINARY(bitwise_or)
KILN_DECLARE_BINARY(bitwise_xor)
// Integers shifted by a count in [0, bits): left, zeros in; right, arithmetic (the sign copied in), as NumPy,
// JAX, TF and PyTorch shift signed integers. A count outside gives what shifting one bit at a time would: 0 to the
// left, 0 or -1 to the right (XLA's and JAX's definition; C leaves it undefined). Bools and floats are refused.
KILN_DECLARE_BINARY(left_shift)
KILN_DECLARE_BINARY(right_shift)
KILN_DECLARE_BINARY(maximum)
KILN_DECLARE_BINARY(minimum)
KILN_DECLARE_BINARY(eq)
KILN_DECLARE_BINARY(ne)
KILN_DECLARE_BINARY(lt)
KILN_DECLARE_BINARY(le)
KILN_DECLARE_BINARY(gt)
KILN_DECLARE_BINARY(ge)
KILN_DECLARE_BINARY(logical_and)
KILN_DECLARE_BINARY(logical_or)
#undef KILN_DECLARE_BINARY

// Elementwise select with broadcasting: cond ? a : b. `cond` is cast to bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Location location = Location::current());
Tensor where(const Tensor& cond, const Tensor& a, Scalar b, Location location = Location::current());
Tensor where(const Tensor& cond, Scalar a, const Tensor& b, Location location = Location::current());
// Element tests (tf.math.is_nan / is_inf / is_finite, jnp.isnan / isinf / isfinite, torch.isnan / ...): bool
// results of x's shape. Integers and bools are never NaN or infinite, and always finite.
Tensor isnan(const Tensor& x, Location location = Location::current());
Tensor isinf(const Tensor& x, Location location = Location::current());
Tensor isfinite(const Tensor& x, Location location = Location::current());
// Toward zero: floor for x >= 0, ceil below (trunc(-0.5) is -0); integers as they are. np.trunc, torch.trunc.
Tensor trunc(const Tensor& x, Location location = Location::current());
// 1 / x (integers and bools divide as floats, as div does). tf.math.reciprocal, torch.reciprocal.
Tensor reciprocal(const Tensor& x, Location location = Location::current());
// a != b as bools (nonzero is true), with broadcasting. tf.math.logical_xor, jnp.logical_xor.
Tensor logical_xor(const Tensor& a, const Tensor& b, Location location = Location::current());
// log(e^a + e^b) without overflow or underflow, with broadcasting (np.logaddexp, jnp.logaddexp, torch.logaddexp,
// tf.experimental.numpy.logaddexp): max(a, b) + log1p(e^-|a - b|); a + log 2 where a = b, so logaddexp(-inf, -inf)
// is -inf and logaddexp(inf, inf) is inf; NaN gives NaN. Integers and bools compute in f32.
Tensor logaddexp(const Tensor& a, const Tensor& b, Location location = Location::current());
// Whether a is within atol + rtol |b| of b, elementwise with broadcasting, as NumPy's, JAX's and PyTorch's isclose
// (with their defaults; b is the reference, so it is not symmetric): an infinity is close only to itself, NaN to
// nothing unless `equal_nan`. Integers and bools compare as floats. allclose: a rank-0 bool, every element close.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
               Location location = Location::current());
Tensor allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
                Location location = Location::current());
// Trigonometric, inverse and hyperbolic functions (tf.math.*, jnp.*, torch.*), from sin, cos, exp, expm1, log,
// log1p and atan, written where the naive formula cancels or overflows: the JIT fuses each into its consumers'
// kernel. Integers and bools compute in f32; IEEE special values as C's <math.h> (asin(2) is NaN, atanh(1) is
// inf, sinh(-0) is -0). Accuracy, f32: within 4 ULP of the exact function (tan: relative to the rounded
// argument's tangent).
// The angle of the point (x, y) in [-pi, pi]: atan2(y, x), y first as in C, NumPy, TF and PyTorch. The signs of
// zeros count: atan2(+0, -0) = pi, atan2(-0, +0) = -0; with broadcasting.
Tensor atan2(const Tensor& y, const Tensor& x, Location location = Location::current());
Tensor tan(const Tensor& x, Location location = Location::current());
Tensor asin(const Tensor& x, Location location = Location::current());  // in [-pi/2, pi/2]; NaN outside [-1, 1]
Tensor acos(const Tensor& x, Location location = Location::current());  // in [0, pi]; NaN outside [-1, 1]
Tensor sinh(const Tensor& x, Location location = Location::current());
Tensor cosh(const Tensor& x, Location location = Location::current());
Tensor asinh(const Tensor& x, Location location = Location::current());
Tensor acosh(const Tensor& x, Location location = Location::current());  // NaN below 1
Tensor atanh(const Tensor& x, Location location = Location::current());  // +-inf at +-1, NaN beyond
// Each element limited to [low, high]: minimum(maximum(x, low), high), as jnp.clip, tf.clip_by_value and
// torch.clamp compute it, so a NaN stays NaN and where low > high every element is high. Bounds broadcast.
Tensor clip(const Tensor& x, Scalar low, Scalar high, Location location = Location::current());
Tensor clip(const Tensor& x, const Tensor& low, const Tensor& high, Location location = Location::current());

// ---- operators ----------------------------------------------------------------
#define KILN_DECLARE_OPERATOR(symbol)                              \
  Tensor operator symbol(const Operand& a, const Tensor& b);       \
  Tensor operator symbol(const Operand& a, Scalar b);              \
  Tensor operator symbol(Scalar a, const Operand& b);
KILN_DECLARE_OPERATOR(+)
KILN_DECLARE_OPERATOR(-)
KILN_DECLARE_OPERATOR(*)
KILN_DECLARE_OPERATOR(/)
KILN_DECLARE_OPERATOR(%)  // remainder: Python's and NumPy's %, in the divisor's sign
KILN_DECLARE_OPERATOR(&)  // bitwise_and, bitwise_or, bitwise_xor
KILN_DECLARE_OPERATOR(|)
KILN_DECLARE_OPERATOR(^)
KILN_DECLARE_OPERATOR(<<)  // left_shift, right_shift
KILN_DECLARE_OPERATOR(>>)
KILN_DECLARE_OPERATOR(==)
KILN_DECLARE_OPERATOR(!=)
KILN_DECLARE_OPERATOR(<)
KILN_DECLARE_OPERATOR(<=)
KILN_DECLARE_OPERATOR(>)
KILN_DECLARE_OPERATOR(>=)
KILN_DECLARE_OPERATOR(&&)
KILN_DECLARE_OPERATOR(||)
#undef KILN_DECLARE_OPERATOR
Tensor operator-(const Operand& x);
Tensor operator!(const Operand& x);
Tensor operator~(const Operand& x);  // bitwise_not

// ---- reductions ----------------------------------------------------------------
// Which axes to reduce. Default: all of them (TensorFlow's axis=None). `{}` is
// the empty list: nothing is reduced. Negative axes count from the end.
class Axes {
 public:
  Axes() = default;
  Axes(std::initializer_list<std::int64_t> axes) : all_(false), axes_(axes) {}
  Axes(std::vector<std::int64_t> axes) : all_(false), axes_(std::move(axes)) {}  // NOLINT
  Axes(std::int64_t axis) : all_(false), axes_{axis} {}                          // NOLINT
  Axes(int axis) : all_(false), axes_{axis} {}                                   // NOLINT
  bool all() const { return all_; }
  const std::vector<std::int64_t>& list() const { return axes_; }

 private:
  bool all_ = true;
  std::vector<std::int64_t> axes_;
};

Tensor reduce_sum(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
Tensor reduce_mean(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
Tensor reduce_max(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
Tensor reduce_min(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
Tensor reduce_prod(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
// Index (i64) of the first largest element along one axis.
Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdims = false, Location location = Location::current());
// Index (i64) of the first smallest element along one axis. For floats a NaN counts as the smallest, so the
// first NaN's index is the result, as in NumPy, JAX and PyTorch (argmax gives the first NaN too).
Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdims = false, Location location = Location::current());
// log(sum(exp(x))) over `axes`, computed as m + log(sum(exp(x - m))) with m the maximum where it is finite (0
// elsewhere), so nothing overflows for large x and rows of very negative x do not underflow to log 0
// (tf.reduce_logsumexp, jax.nn.logsumexp). +inf anywhere gives +inf, all -inf (or no elements) -inf. Integers compute in f32.
Tensor reduce_logsumexp(const Tensor& x, Axes axes = {}, bool keepdims = false,
                        Location location = Location::current());
// The mean of the squared deviations from the mean over `axes`: the population variance (tf.math.reduce_variance,
// NumPy's and JAX's ddof = 0; PyTorch's torch.var divides by n - 1 unless correction=0), and its square root.
// Two passes (the mean, then the deviations), so a large mean does not cancel the variance away. Integers compute
// in f32.
Tensor reduce_variance(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
Tensor reduce_std(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
// Whether any (all) elements over `axes` are nonzero (NaN counts as nonzero, as in NumPy): bool results. Of no
// elements, any is false and all is true.
Tensor reduce_any(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());
Tensor reduce_all(const Tensor& x, Axes axes = {}, bool keepdims = false, Location location = Location::current());

// ---- scans ---------------------------------------------------------------------
// Running combinations along one axis (tf.math.cumsum / cumprod, jnp.cumsum / cumprod, jax.lax.cummax / cummin,
// torch.cumsum / cumprod / cummax's values): element i combines elements 0..i in order. `exclusive` (TensorFlow's)
// leaves element i out: the first is the identity (0, 1, the dtype's lowest or highest, -inf / +inf for floats);
// `reverse` runs from the end. The result has x's shape; a NaN carries on from where it appears. bool sums and
// products count in i32, as reduce_sum does; cummax and cummin keep every dtype.
struct ScanOptions {
  bool exclusive = false;
  bool reverse = false;
};
Tensor cumsum(const Tensor& x, std::int64_t axis, ScanOptions options = {}, Location location = Location::current());
Tensor cumprod(const Tensor& x, std::int64_t axis, ScanOptions options = {}, Location location = Location::current());
Tensor cummax(const Tensor& x, std::int64_t axis, ScanOptions options = {}, Location location = Location::current());
Tensor cummin(const Tensor& x, std::int64_t axis, ScanOptions options = {}, Location location = Location::current());

// ---- sorting -------------------------------------------------------------------
// Orderings along one axis. Floats order with NaN above every number (NumPy's, JAX's and PyTorch's convention:
// ascending puts NaNs last, descending first) and -0 equal to +0; bools order false before true. Equal elements keep
// the order of their indices, descending too: argsort is stable (torch.sort(stable=True), jnp.argsort(stable=True,
// descending=...)). Like tf.sort, x needs rank >= 1; `axis` may count from the end. Indices are i64, as argmax's.
// Each is one library kernel in compiled functions.
Tensor sort(const Tensor& x, std::int64_t axis = -1, bool descending = false, Location location = Location::current());
Tensor argsort(const Tensor& x, std::int64_t axis = -1, bool descending = false,
               Location location = Location::current());
// The k largest elements along the last axis and their indices, largest first, a tie won by the lower index, a NaN
// larger than every number (tf.math.top_k, torch.topk with sorted=True; k in [0, the last axis's size]). Read with a
// structured binding: `auto [values, indices] = top_k(logits, 5);`, and return it from a kiln::function as is.
struct TopK {
  Tensor values;   // x's dtype, x's shape with the last axis k long
  Tensor indices;  // i64, the same shape: values = take_along_axis(x, indices, -1)
};
TopK top_k(const Tensor& x, std::int64_t k, Location location = Location::current());

// ---- matmul --------------------------------------------------------------------
struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
// Matrix product over the last two axes; leading (batch) axes broadcast. A
// rank-1 operand is a vector, as in NumPy's matmul. f32/f64 go through BLAS.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options = {}, Location location = Location::current());

// Einstein summation, as np.einsum, jnp.einsum, tf.einsum and torch.einsum: "bqd,bkd->bqk" multiplies the operands
// along their labelled axes and sums over the labels the output leaves out. Labels are letters (a-z, A-Z); spaces
// are ignored; a label of size 1 in one operand broadcasts against n in another (as in torch.einsum); a label
// repeated within one operand takes its diagonal ("ii->i", the trace "ii->"); `...` stands for the axes the
// letters leave, aligned on the right across operands and kept in front of the output unless an explicit output
// leaves it out (then summed). Without "->" the output is the ellipsis axes, then the letters used once, in
// alphabetical order (uppercase first). Dtypes promote as in matmul (bool operands are an error, as there).
// Written with transposes, reshapes, reductions and one matmul per pair of operands (the pair with the smallest
// result first, as opt_einsum's greedy order that jnp.einsum uses), so the JIT fuses it like code written with
// them.
Tensor einsum(std::string_view subscripts, const std::vector<Tensor>& operands,
              Location location = Location::current());

// ---- shape ops -----------------------------------------------------------------
// One dimension may be -1 (inferred).
Tensor reshape(const Tensor& x, std::vector<std::int64_t> shape, Location location = Location::current());
// `permutation` empty: reverse the axes.
Tensor transpose(const Tensor& x, std::vector<std::int64_t> permutation = {}, Location location = Location::current());
Tensor broadcast_to(const Tensor& x, const Shape& shape, Location location = Location::current());
// NumPy basic slicing per axis: x[start:stop:step]. Shorter lists leave the
// remaining axes whole; negative indices count from the end and are clamped.
struct SliceOptions {
  std::vector<std::int64_t> start = {};
  std::vector<std::int64_t> stop = {};
  std::vector<std::int64_t> step = {};
};
Tensor slice(const Tensor& x, SliceOptions options, Location location = Location::current());
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis, Location location = Location::current());
// The tensors, all of one shape, along a new axis at `axis` (in [-(rank + 1), rank]); dtypes promote as in
// concat. stack({a, b}, 0) of two [3] tensors is [2, 3] (tf.stack, np.stack, torch.stack).
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t axis = 0, Location location = Location::current());
// `x` cut along `axis` into `count` pieces of equal size (tf.split and np.split with a number of sections; note
// that torch.split's integer is a piece's size instead). The axis's size must divide by `count`.
std::vector<Tensor> split(const Tensor& x, std::int64_t count, std::int64_t axis = 0,
                          Location location = Location::current());
// `x` cut along `axis` into pieces of the given sizes, which must add up to the axis's size; one size may be -1,
// the rest (tf.split's size_splits, torch.split with a list).
std::vector<Tensor> split_sizes(const Tensor& x, std::vector<std::int64_t> sizes, std::int64_t axis = 0,
                                Location location = Location::current());
// `x` with `paddings[i].first` elements of `value` before and `.second` after it along axis i (tf.pad and
// jnp.pad in constant mode; torch.nn.functional.pad lists the axes from the last). One pair per axis; none
// negative. Each padded axis is one concatenation, a copy of the whole tensor (the JIT runs concats of a
// concat's result by the standard kernel).
Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings, Scalar value = 0,
           Location location = Location::current());
// `x` repeated `multiples[i]` times along axis i (np.tile, tf.tile, torch's Tensor.tile): [2, 3] tiled {2, 1} is
// [4, 3], the rows repeated as a block. Fewer multiples than axes repeat the last axes; more add leading axes.
Tensor tile(const Tensor& x, const std::vector<std::int64_t>& multiples, Location location = Location::current());
// `x` with the order of its elements reversed along `axes` (np.flip, jnp.flip, tf.reverse, torch.flip; Axes() for
// all of them): a slice with step -1, which every kernel reads where the elements lie.
Tensor flip(const Tensor& x, Axes axes = {}, Location location = Location::current());
// `x` rotated by `shift` along `axis`: element i goes to (i + shift) mod n, negative shifts to the left (np.roll and
// torch.roll with an axis, tf.roll, jnp.roll). Two slices and a concat.
Tensor roll(const Tensor& x, std::int64_t shift, std::int64_t axis, Location location = Location::current());
// The lower (tril) or upper (triu) triangle of the last two axes, the rest 0 (np.tril / np.triu, jnp.*, torch.*;
// tf.linalg.band_part): tril keeps x[..., i, j] where j <= i + diagonal, triu where j >= i + diagonal. A
// comparison of two aranges and a select, which the JIT fuses into the ops around it (a causal mask).
Tensor tril(const Tensor& x, std::int64_t diagonal = 0, Location location = Location::current());
Tensor triu(const Tensor& x, std::int64_t diagonal = 0, Location location = Location::current());
// Slices of `params` along `axis` picked by integer `indices` (i32 or i64, any shape), as NumPy's take,
// tf.gather and jnp.take: the result's shape is params' with that axis replaced by the indices' shape, so
// gather(table [vocabulary, width], tokens [batch, length]) is [batch, length, width] (an embedding lookup).
// Negative indices count from the end; one outside [-n, n) is a kiln::ValueError when the op runs (on a GPU
// that means the call waits for the GPU, as nonzero does).
Tensor gather(const Tensor& params, const Tensor& indices, std::int64_t axis = 0,
              Location location = Location::current());
// Picks along `axis` of `values` element by element: result[..., j, ...] = values[..., indices[..., j, ...], ...]
// (NumPy's and JAX's take_along_axis, torch.gather(values, axis, indices)). indices are i32 or i64 with values'
// rank; off `axis` the two broadcast against each other, and the result has the indices' size on `axis`. Negative
// indices count from the end; one outside [-n, n) is a ValueError when the op runs (compiled or not). Each row's
// largest element: take_along_axis(x, argmax(x, -1, true), -1).
Tensor take_along_axis(const Tensor& values, const Tensor& indices, std::int64_t axis,
                       Location location = Location::current());
// gather's adjoint: `operand` with the slices of `updates` added at the rows `indices` name along `axis`, rows
// named twice receiving both (in index order): scatter_add(zeros({vocabulary, width}), tokens, row_gradients) is an
// embedding table's gradient (torch.index_add, jnp's x.at[indices].add(updates), tf.tensor_scatter_nd_add along one
// axis). `updates` has gather(operand, indices, axis)'s shape and operand's dtype; bools are refused. Negative indices
// count from the end; one outside [-n, n) is a ValueError when the op runs.
Tensor scatter_add(const Tensor& operand, const Tensor& indices, const Tensor& updates, std::int64_t axis = 0,
                   Location location = Location::current());
// Sums of data's rows by segment: result[s] = the sum of data[i] over the i with segment_ids[i] == s, for s in
// [0, num_segments) (jax.ops.segment_sum, tf.math.unsorted_segment_sum): data [n, ...], integer segment_ids [n],
// result [num_segments, ...]; rows sum in index order, an empty segment is 0, and ids outside [0, num_segments) are
// dropped (JAX's; TensorFlow drops negative ones). A scatter_add; bools are refused.
Tensor segment_sum(const Tensor& data, const Tensor& segment_ids, std::int64_t num_segments,
                   Location location = Location::current());
Tensor expand_dims(const Tensor& x, std::int64_t axis, Location location = Location::current());
// Default: remove every size-1 axis.
Tensor squeeze(const Tensor& x, Axes axes = {}, Location location = Location::current());

// ---- never compilable ----------------------------------------------------------
// Runs `callback` on concrete tensors, at call time even inside a traced
// function (like jax.pure_callback). It must return a tensor of the declared
// dtype and shape. A graph holding one always runs on the standard executor.
using HostCallback = std::function<Tensor(const std::vector<Tensor>&)>;
Tensor host_call(HostCallback callback, const std::vector<Tensor>& inputs, DType dtype, const Shape& shape,
                 Location location = Location::current());
// Indices (i64, shape [count, rank]) of the nonzero elements, row-major
// order. The output shape depends on the data, so the JIT cannot compile it.
Tensor nonzero(const Tensor& x, Location location = Location::current());

}  // namespace kiln
