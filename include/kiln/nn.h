#pragma once
// Neural-network composites, built from kiln's primitive ops (so the JIT sees
// and fuses their parts).

#include <kiln/ops.h>

#include <array>
#include <optional>
#include <utility>

namespace kiln::nn {

Tensor relu(const Tensor& x, Location location = Location::current());
Tensor sigmoid(const Tensor& x, Location location = Location::current());
enum class GeluApproximation { tanh, erf };
// gelu(x) = x * Phi(x); the tanh form is the common approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as the equal
// x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), which stays accurate where
// 1 + tanh cancels (large negative x). The erf form, exact, is computed as
// 0.5 x erfc(-x / sqrt 2) for the same reason. Where the result would be
// below the normal floats (x < -9.97 in the tanh form, x < -12.87 in the
// erf form: magnitudes under 2e-37 and 5e-37) it is -0.
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::tanh,
            Location location = Location::current());
// silu(x) = x sigmoid(x) (swish; tf.nn.silu, jax.nn.silu, torch's SiLU), -0 below x = -87 where the result's
// magnitude would be under 1.4e-36, as gelu's is.
Tensor silu(const Tensor& x, Location location = Location::current());
// softplus(x) = log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|): no overflow for large x, and tiny results
// keep their relative accuracy (softplus(-30) = 9.4e-14). Below x = -87, where the result would be under 1.7e-38,
// it is 0, so no intermediate is subnormal (as gelu). tf.math.softplus, jax.nn.softplus, torch's Softplus.
Tensor softplus(const Tensor& x, Location location = Location::current());
// log(sigmoid(x)) = -softplus(-x), finite for every finite x (log(sigmoid(-200)) would be log 0).
Tensor log_sigmoid(const Tensor& x, Location location = Location::current());
// x where x > 0, alpha (e^x - 1) elsewhere (elu(-0) is -0), through expm1 so that small negative inputs keep
// their accuracy. tf.nn.elu, jax.nn.elu, torch's ELU.
Tensor elu(const Tensor& x, double alpha = 1.0, Location location = Location::current());
// scale elu(x, alpha) with SELU's constants (alpha 1.6732632..., scale 1.0507009...; Klambauer et al. 2017).
Tensor selu(const Tensor& x, Location location = Location::current());
// min(max(x, 0), 6); hard_sigmoid(x) = relu6(x + 3) / 6 and hard_swish(x) = x hard_sigmoid(x) (MobileNetV3; PyTorch's,
// JAX's and Keras 3's forms); mish(x) = x tanh(softplus(x)). NaN stays NaN in each.
Tensor relu6(const Tensor& x, Location location = Location::current());
Tensor hard_sigmoid(const Tensor& x, Location location = Location::current());
Tensor hard_swish(const Tensor& x, Location location = Location::current());
Tensor mish(const Tensor& x, Location location = Location::current());
// x where x >= 0, negative_slope * x elsewhere. The default slope is PyTorch's and JAX's 0.01 (TensorFlow's
// tf.nn.leaky_relu defaults to 0.2).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01, Location location = Location::current());
// Numerically stable: subtracts the maximum along `axis` first.
Tensor softmax(const Tensor& x, std::int64_t axis = -1, Location location = Location::current());
Tensor log_softmax(const Tensor& x, std::int64_t axis = -1, Location location = Location::current());
// Normalizes over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta.
// gamma and beta may be undefined Tensors (then 1 and 0).
Tensor layer_norm(const Tensor& x, const Tensor& gamma = {}, const Tensor& beta = {}, double epsilon = 1e-5,
                  Location location = Location::current());
// The mean and the population variance of `x` over `axes` (tf.nn.moments; torch.var_mean with correction=0), the
// variance from that mean in a second pass, as reduce_variance: a large mean does not cancel it away. Integers
// compute in f32. A pair, as tf.nn.moments' tuple, so that a kiln::function can return it:
// `auto [mean, variance] = nn::moments(x, {0, 1, 2});`.
std::pair<Tensor, Tensor> moments(const Tensor& x, Axes axes, bool keepdims = false,
                                  Location location = Location::current());
// Batch normalization with given statistics: (x - mean) / sqrt(variance + epsilon) * gamma + beta, each of mean,
// variance, gamma and beta broadcast against x (one value per channel, [C], for NHWC images or [batch, C] rows):
// tf.nn.batch_normalization, Keras' BatchNormalization and torch's batch_norm at inference. In training, the
// statistics are the batch's: moments(x, {0, 1, 2}) for NHWC. gamma and beta may be undefined Tensors (then 1 and
// 0). The per-channel factor rsqrt(variance + epsilon) gamma is computed once, so the elements take a subtraction,
// a multiplication and an addition; after a convolution or a dense layer, the JIT computes them in its epilogue.
Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& variance, const Tensor& gamma = {},
                  const Tensor& beta = {}, double epsilon = 1e-5, Location location = Location::current());
// Root-mean-square normalization over the last axis: x / sqrt(mean(x^2) + epsilon) * gamma (LLaMA's and T5's
// norm; torch.nn.functional.rms_norm, keras.layers.RMSNormalization, whose default epsilon this is). gamma may
// be an undefined Tensor (then 1).
Tensor rms_norm(const Tensor& x, const Tensor& gamma = {}, double epsilon = 1e-6,
                Location location = Location::current());

// x / sqrt(max(sum(x^2 over axes), epsilon)), TensorFlow's tf.math.l2_normalize (and its default epsilon): rows
// of unit length, and an all-zero row stays zero. One row kernel over the last axis.
Tensor l2_normalize(const Tensor& x, Axes axes = -1, double epsilon = 1e-12, Location location = Location::current());
// x / (1 + |x|), in (-1, 1). tf.nn.softsign, jax.nn.soft_sign, torch's Softsign.
Tensor softsign(const Tensor& x, Location location = Location::current());

// ---- convolution and pooling -------------------------------------------------
// Images are NHWC ([batch, height, width, channels]) and filters HWIO ([height, width, in, out]), TensorFlow's
// layout (tf.nn.conv2d); sequences NWC and filters WIO (tf.nn.conv1d).
//
// How the spatial axes are padded. valid: none, so a window never leaves the input. same: zeros (for pooling:
// elements that take no part) so that the output has ceil(input / stride) positions, the odd one at the end, as
// TensorFlow and JAX's "SAME" do.
enum class Padding { valid, same };
using PaddingPair = std::pair<std::int64_t, std::int64_t>;  // (before, after)

struct Conv2dOptions {
  std::array<std::int64_t, 2> strides = {1, 1};
  Padding padding = Padding::valid;
  // Explicit zero padding of height and width, instead of `padding` (TensorFlow's padding="EXPLICIT",
  // PyTorch's padding=(h, w)).
  std::optional<std::array<PaddingPair, 2>> explicit_padding = std::nullopt;
  std::array<std::int64_t, 2> dilations = {1, 1};
};
// The cross-correlation of `input` [N, H, W, C] with `filters` [KH, KW, C / groups, O]: [N, OH, OW, O]. When the
// filters' input channels are fewer than the input's, the channels split into groups = C / filters' in (which
// must divide C and O), each convolved with its own O / groups filters (tf.nn.conv2d's grouped form, PyTorch's
// groups); filters [KH, KW, 1, C * m] are a depthwise convolution with m filters per channel.
// Computed from kiln's primitives, so the JIT fuses it: the windows (strided slices of the padded input) side by
// side along the channels, times the filters as one [KH KW C, O] matrix (im2col); a depthwise convolution is a
// sum of KH KW windows times their weights, one loop kernel. f32, f64 and integer dtypes; the two operands
// promote as matmul's do.
Tensor conv2d(const Tensor& input, const Tensor& filters, Conv2dOptions options = {},
              Location location = Location::current());

struct Conv1dOptions {
  std::int64_t stride = 1;
  Padding padding = Padding::valid;
  std::optional<PaddingPair> explicit_padding = std::nullopt;
  std::int64_t dilation = 1;
};
// conv2d over one spatial axis: `input` [N, W, C], `filters` [K, C / groups, O], result [N, OW, O].
Tensor conv1d(const Tensor& input, const Tensor& filters, Conv1dOptions options = {},
              Location location = Location::current());

struct Pool2dOptions {
  std::array<std::int64_t, 2> window = {2, 2};
  // Unset: the window's size (TensorFlow's and PyTorch's default strides for pooling).
  std::optional<std::array<std::int64_t, 2>> strides = std::nullopt;
  Padding padding = Padding::valid;
};
// The largest element of each window of `input` [N, H, W, C], per channel: [N, OH, OW, C] (tf.nn.max_pool2d).
// Padding takes no part (as if -infinity); a NaN in a window makes its result NaN. Floats and integers.
Tensor max_pool2d(const Tensor& input, Pool2dOptions options = {}, Location location = Location::current());
// The mean of each window, over the elements inside the input only: with same padding a corner window of 2 x 2
// by 3 x 3 averages its 4 elements (tf.nn.avg_pool2d; PyTorch's count_include_pad=False). Floats.
Tensor avg_pool2d(const Tensor& input, Pool2dOptions options = {}, Location location = Location::current());

// Dropout (jax's and flax's, tf.nn.dropout's): each element of x kept with probability 1 - rate and scaled by
// 1 / (1 - rate), else 0; the mask drawn from `key` (kiln::random::key), so the same key drops the same elements
// on every executor and device. Inside a compiled function the mask is computed in the kernel that applies it.
// rate 0 returns x; rate 1 zeros.
Tensor dropout(const Tensor& x, double rate, const Tensor& key, Location location = Location::current());

// One-hot rows for integer class indices (i32 or i64): a new last axis of `depth`, 1 where it equals the index and
// 0 elsewhere (so an index outside [0, depth) gives a row of zeros, as tf.one_hot and jax.nn.one_hot do).
// Inside a traced function it is an iota compared with the indices, which fuses into its consumer:
// reduce_sum(one_hot(labels, n) * log_softmax(logits), {-1}) never writes the one-hot rows.
Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype = DType::f32,
               Location location = Location::current());

// Losses per example, not reduced over the batch (as TensorFlow's *_with_logits ops; take reduce_mean for the
// average).
// -log softmax(logits)[label] over the last axis, for integer class labels of logits' leading shape: logsumexp(logits)
// minus the label's logit, one row kernel. A label outside [0, classes) gives NaN (as TensorFlow on a GPU).
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                    Location location = Location::current());
// -sum(labels log softmax(logits)) over the last axis, for labels that are probabilities of logits' shape.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Location location = Location::current());
// The binary cross-entropy of sigmoid(logits) against labels in [0, 1], elementwise: max(x, 0) - x z +
// log(1 + e^-|x|) (tf.nn.sigmoid_cross_entropy_with_logits), finite for every finite logit.
Tensor sigmoid_cross_entropy(const Tensor& logits, const Tensor& labels, Location location = Location::current());

}  // namespace kiln::nn
