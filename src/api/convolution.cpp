// Convolution and pooling over the spatial axes of NHWC images, written with the primitive ops so that the JIT
// sees every step: a window is a strided slice of the padded input (an index map inside a fused kernel), a
// convolution multiplies the windows side by side with the filters as one matrix (im2col, the generated GEMM), and
// pooling combines the windows elementwise (one loop kernel).

#include "api/dispatch.h"

#include <kiln/creation.h>
#include <kiln/error.h>
#include <kiln/nn.h>

#include <limits>
#include <string>
#include <vector>

namespace kiln::nn {
namespace {

std::string describe(const Tensor& x) { return std::string(to_string(x.dtype())) + x.shape().to_string(); }

// One spatial axis of a windowed op: where its windows start in the padded input and how many there are.
struct AxisWindows {
  std::int64_t size = 0;  // of the input
  std::int64_t window = 1, stride = 1, dilation = 1;
  PaddingPair padding;
  std::int64_t outputs = 0;
  // The input elements a window spans, from its first to its last tap.
  std::int64_t extent() const { return (window - 1) * dilation + 1; }
  // Padded-input coordinates of tap `tap` for outputs 0, 1, ...: [first, first + (outputs - 1) stride], by stride.
  SliceOptions taps(std::int64_t tap) const {
    const std::int64_t first = tap * dilation;
    // No outputs (an empty axis with same padding): an empty slice, not a stop counted from the end.
    return {{first}, {outputs == 0 ? first : first + (outputs - 1) * stride + 1}, {stride}};
  }
};

// The geometry of one spatial axis, or a ShapeError naming `op` when the arguments make none.
AxisWindows axis_windows(const char* op, const char* axis_name, std::int64_t size, std::int64_t window,
                         std::int64_t stride, std::int64_t dilation, Padding padding,
                         const std::optional<PaddingPair>& explicit_padding, const Location& location) {
  auto fail = [&](const std::string& detail) {
    throw ShapeError(op, std::string(axis_name) + ": " + detail, location);
  };
  if (window < 1) fail("the window (filter) size must be >= 1, got " + std::to_string(window));
  if (stride < 1) fail("the stride must be >= 1, got " + std::to_string(stride));
  if (dilation < 1) fail("the dilation must be >= 1, got " + std::to_string(dilation));
  AxisWindows axis{.size = size, .window = window, .stride = stride, .dilation = dilation, .padding = {0, 0}};
  if (explicit_padding) {
    if (explicit_padding->first < 0 || explicit_padding->second < 0)
      fail("explicit padding must be >= 0, got (" + std::to_string(explicit_padding->first) + ", " +
           std::to_string(explicit_padding->second) + ")");
    axis.padding = *explicit_padding;
  } else if (padding == Padding::same) {
    // TensorFlow's rule: ceil(size / stride) outputs, the padding they need split with the odd element after.
    axis.outputs = (size + stride - 1) / stride;
    const std::int64_t needed = std::max<std::int64_t>((axis.outputs - 1) * stride + axis.extent() - size, 0);
    axis.padding = {needed / 2, needed - needed / 2};
    if (size == 0) axis.padding = {0, 0};
    return axis;
  }
  const std::int64_t padded = size + axis.padding.first + axis.padding.second;
  if (padded < axis.extent())
    fail("the window spans " + std::to_string(axis.extent()) + " elements, more than the " + std::to_string(padded) +
         " of the " + (explicit_padding ? "padded " : "") + "input");
  axis.outputs = (padded - axis.extent()) / stride + 1;
  return axis;
}

// `input` [N, H, W, C] padded with `value` on the spatial axes (itself when there is nothing to pad).
Tensor padded(const Tensor& input, const AxisWindows& height, const AxisWindows& width, Scalar value,
              const Location& location) {
  if (height.padding == PaddingPair{0, 0} && width.padding == PaddingPair{0, 0}) return input;
  return pad(input, {{0, 0}, height.padding, width.padding, {0, 0}}, value, location);
}

// The window tap (row, column) of every output position: [N, OH, OW, C], from the padded input.
Tensor tap(const Tensor& padded_input, const AxisWindows& height, const AxisWindows& width, std::int64_t row,
           std::int64_t column, const Location& location) {
  const SliceOptions rows = height.taps(row), columns = width.taps(column);
  const Shape& shape = padded_input.shape();
  return slice(padded_input,
               {{0, rows.start[0], columns.start[0], 0},
                {shape[0], rows.stop[0], columns.stop[0], shape[3]},
                {1, rows.step[0], columns.step[0], 1}},
               location);
}

// Every window tap of the padded input, row by row.
std::vector<Tensor> taps_of(const Tensor& padded_input, const AxisWindows& height, const AxisWindows& width,
                            const Location& location) {
  std::vector<Tensor> taps;
  for (std::int64_t row = 0; row < height.window; ++row)
    for (std::int64_t column = 0; column < width.window; ++column)
      taps.push_back(tap(padded_input, height, width, row, column, location));
  return taps;
}

// im2col as one product: the taps side by side along the channels, in the filters' (row, column, channel) order,
// times the filters [KH, KW, C, O] as a matrix.
Tensor window_product(const std::vector<Tensor>& taps, const Tensor& filters, const Location& location) {
  const Tensor windows = taps.size() == 1 ? taps.front() : concat(taps, 3, location);
  const Shape& filter_shape = filters.shape();
  const std::int64_t depth = filter_shape[0] * filter_shape[1] * filter_shape[2];
  return matmul(windows, reshape(filters, {depth, filter_shape[3]}, location), {}, location);
}

void require_rank(const Tensor& x, int rank, const char* op, const char* what, const char* layout,
                  const Location& location) {
  if (detail::checked_rank(x, op, location) != rank)
    throw ShapeError(
        op, std::string(what) + " must have rank " + std::to_string(rank) + " (" + layout + "), got " + describe(x),
        location);
  if (!x.shape().is_static())
    throw ShapeError(op, std::string("cannot use ") + what + " whose shape depends on data", location);
}

// A grouped convolution as one batched product: the windows [N, OH, OW, groups, KH KW in] (each group's channels
// tap by tap, the filters' row order) times the filters [groups, KH KW in, out per group].
Tensor grouped_product(const Tensor& windows, const Tensor& filters, std::int64_t groups, const Location& location) {
  const Shape &window_shape = windows.shape(), &filter_shape = filters.shape();
  const std::int64_t depth = filter_shape[0] * filter_shape[1] * filter_shape[2], outputs = filter_shape[3];
  const std::int64_t positions = window_shape[0] * window_shape[1] * window_shape[2];
  const Tensor left = transpose(reshape(windows, {positions, groups, depth}, location), {1, 0, 2}, location);
  const Tensor right = transpose(reshape(filters, {depth, groups, outputs / groups}, location), {1, 0, 2}, location);
  const Tensor product = transpose(matmul(left, right, {}, location), {1, 0, 2}, location);
  return reshape(product, {window_shape[0], window_shape[1], window_shape[2], outputs}, location);
}

// Up to this many groups, a grouped convolution is a convolution per group (its windows gathered, never written);
// beyond, one batched product (its windows written once), because the kernels per group add up in the first call's
// compile: 8x28x28x256 in 16 groups, both gradients compiled in 1.4 s (0.47 batched) and ran in 37 ms (65); in 32
// groups 2.5 s, and ran slower than batched (78 ms against 65); in 128 groups 7.5 s.
constexpr std::int64_t kMostGroupsAsConvolutions = 16;

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& filters, Conv2dOptions options, Location location) {
  require_rank(input, 4, "conv2d", "the input", "NHWC", location);
  require_rank(filters, 4, "conv2d", "the filters", "[height, width, in, out]", location);
  if (input.dtype() != filters.dtype() || input.dtype() == DType::boolean)
    throw DTypeError(
        "conv2d",
        "the input and filters must have one numeric dtype, got " + describe(input) + " and " + describe(filters),
        location);
  const Shape &shape = input.shape(), &filter_shape = filters.shape();
  const std::int64_t channels = shape[3], group_channels = filter_shape[2], outputs = filter_shape[3];
  if (group_channels < 1 || channels % group_channels != 0 || outputs % (channels / group_channels) != 0)
    throw ShapeError("conv2d",
                     "the filters " + describe(filters) + " take " + std::to_string(group_channels) +
                         " input channels: they must divide the input's " + std::to_string(channels) +
                         " (in groups), and the groups must divide the " + std::to_string(outputs) + " outputs",
                     location);
  const std::int64_t groups = channels / group_channels;
  auto explicit_axis = [&](int axis) {
    return options.explicit_padding ? std::optional<PaddingPair>((*options.explicit_padding)[axis]) : std::nullopt;
  };
  const AxisWindows height = axis_windows("conv2d", "height", shape[1], filter_shape[0], options.strides[0],
                                          options.dilations[0], options.padding, explicit_axis(0), location);
  const AxisWindows width = axis_windows("conv2d", "width", shape[2], filter_shape[1], options.strides[1],
                                         options.dilations[1], options.padding, explicit_axis(1), location);
  const std::vector<std::int64_t> result_shape = {shape[0], height.outputs, width.outputs, outputs};
  if (groups > 1 && group_channels > 1 && groups <= kMostGroupsAsConvolutions) {
    // Groups of several channels: a convolution per group, of its channels (a slice of the input, padded) and its
    // filters, side by side along the channels. Each group's product gathers its windows where they lie, and its
    // gradients are those of a convolution; one batched product of all groups would need every window written,
    // transposed, as its operand.
    const std::int64_t group_outputs = outputs / groups;
    std::vector<Tensor> results;
    for (std::int64_t group = 0; group < groups; ++group) {
      const Tensor group_input = slice(
          input, {{0, 0, 0, group * group_channels}, {shape[0], shape[1], shape[2], (group + 1) * group_channels}},
          location);
      const Tensor group_filters =
          slice(filters,
                {{0, 0, 0, group * group_outputs},
                 {filter_shape[0], filter_shape[1], group_channels, (group + 1) * group_outputs}},
                location);
      results.push_back(window_product(
          taps_of(padded(group_input, height, width, 0, location), height, width, location), group_filters, location));
    }
    return concat(results, 3, location);
  }
  std::vector<Tensor> taps = taps_of(padded(input, height, width, 0, location), height, width, location);

  if (group_channels == 1 && groups > 1) {
    // Depthwise: each output channel is one input channel's windows times a weight per tap, summed; no product.
    // Output channel c m + k (k < m = outputs / channels) reads input channel c, as TensorFlow orders them.
    const std::int64_t multiplier = outputs / channels;
    Tensor sum;
    for (std::size_t index = 0; index < taps.size(); ++index) {
      const std::int64_t row = static_cast<std::int64_t>(index) / width.window,
                         column = static_cast<std::int64_t>(index) % width.window;
      const Tensor weights =
          reshape(slice(filters, {{row, column}, {row + 1, column + 1}}, location), {channels, multiplier}, location);
      const Tensor term = mul(expand_dims(taps[index], -1, location), weights, location);
      sum = index == 0 ? term : add(sum, term, location);
    }
    return reshape(sum, result_shape, location);
  }
  if (groups == 1) return window_product(taps, filters, location);
  // Many groups of several channels: each tap's channels split into groups, the taps side by side within each group.
  for (Tensor& each : taps)
    each = reshape(each, {shape[0], height.outputs, width.outputs, groups, group_channels}, location);
  const Tensor windows = taps.size() == 1 ? taps.front() : concat(taps, 4, location);
  return grouped_product(windows, filters, groups, location);
}

Tensor conv1d(const Tensor& input, const Tensor& filters, Conv1dOptions options, Location location) {
  require_rank(input, 3, "conv1d", "the input", "NWC", location);
  require_rank(filters, 3, "conv1d", "the filters", "[width, in, out]", location);
  // A convolution of images one row high: the same checks, messages and kernels.
  const Shape &shape = input.shape(), &filter_shape = filters.shape();
  Conv2dOptions planar{.strides = {1, options.stride}, .padding = options.padding, .dilations = {1, options.dilation}};
  if (options.explicit_padding)
    planar.explicit_padding = std::array<PaddingPair, 2>{{{0, 0}, *options.explicit_padding}};
  const Tensor result =
      conv2d(reshape(input, {shape[0], 1, shape[1], shape[2]}, location),
             reshape(filters, {1, filter_shape[0], filter_shape[1], filter_shape[2]}, location), planar, location);
  const Shape& result_shape = result.shape();
  return reshape(result, {result_shape[0], result_shape[2], result_shape[3]}, location);
}

namespace {

struct PoolWindows {
  AxisWindows height, width;
};

PoolWindows pool_windows(const Tensor& input, const Pool2dOptions& options, const char* op, const Location& location) {
  require_rank(input, 4, op, "the input", "NHWC", location);
  const std::array<std::int64_t, 2> strides = options.strides.value_or(options.window);
  return {axis_windows(op, "height", input.shape()[1], options.window[0], strides[0], 1, options.padding, std::nullopt,
                       location),
          axis_windows(op, "width", input.shape()[2], options.window[1], strides[1], 1, options.padding, std::nullopt,
                       location)};
}

// How many taps of each output position's window fall inside the input along one axis: [outputs] of `dtype`,
// from an iota, so the JIT computes it inside the pooling kernel.
Tensor taps_inside(const AxisWindows& axis, DType dtype, Device device, const Location& location) {
  const Tensor positions = arange(0, static_cast<double>(axis.outputs), 1, DType::i64, device, location);
  const Tensor first = sub(mul(positions, axis.stride, location), axis.padding.first, location);
  Tensor count;
  for (std::int64_t tap = 0; tap < axis.window; ++tap) {
    const Tensor position = add(first, tap, location);
    const Tensor inside =
        cast(logical_and(ge(position, 0, location), lt(position, axis.size, location), location), dtype, location);
    count = tap == 0 ? inside : add(count, inside, location);
  }
  return count;
}

}  // namespace

Tensor max_pool2d(const Tensor& input, Pool2dOptions options, Location location) {
  const PoolWindows windows = pool_windows(input, options, "max_pool2d", location);
  if (input.dtype() == DType::boolean)
    throw DTypeError("max_pool2d", "takes numbers, got " + describe(input), location);
  // The padding is the dtype's lowest value, which no window's maximum can be below.
  Scalar lowest = -std::numeric_limits<double>::infinity();
  if (input.dtype() == DType::i32) lowest = std::numeric_limits<std::int32_t>::lowest();
  if (input.dtype() == DType::i64) lowest = std::numeric_limits<std::int64_t>::lowest();
  const Tensor source = padded(input, windows.height, windows.width, lowest, location);
  Tensor result;
  for (const Tensor& value : taps_of(source, windows.height, windows.width, location))
    // maximum() propagates NaN, as tf.nn.max_pool2d does.
    result = result.defined() ? maximum(result, value, location) : value;
  return result;
}

Tensor avg_pool2d(const Tensor& input, Pool2dOptions options, Location location) {
  const PoolWindows windows = pool_windows(input, options, "avg_pool2d", location);
  if (!is_floating(input.dtype())) throw DTypeError("avg_pool2d", "takes floats, got " + describe(input), location);
  const Tensor source = padded(input, windows.height, windows.width, 0, location);
  Tensor sum;
  for (const Tensor& value : taps_of(source, windows.height, windows.width, location))
    sum = sum.defined() ? add(sum, value, location) : value;
  const bool pads = windows.height.padding != PaddingPair{0, 0} || windows.width.padding != PaddingPair{0, 0};
  if (!pads) return div(sum, static_cast<double>(windows.height.window * windows.width.window), location);
  // The windows' element counts, [OH, 1, 1] times [1, OW, 1]: the padding takes no part in the mean.
  const Tensor rows =
      reshape(taps_inside(windows.height, input.dtype(), input.device(), location), {-1, 1, 1}, location);
  const Tensor columns =
      reshape(taps_inside(windows.width, input.dtype(), input.device(), location), {1, -1, 1}, location);
  return div(sum, mul(rows, columns, location), location);
}

}  // namespace kiln::nn
