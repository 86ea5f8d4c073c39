#include "graph_from_bytes.h"

#include "ir/printer.h"
#include "ir/type_rules.h"

#include <kiln/error.h>

#include <cstring>
#include <limits>
#include <vector>

namespace kiln::fuzz {
namespace {

using ir::Op;

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }
  bool flag() { return (byte() & 1) != 0; }
  // True about once in `odds` draws.
  bool rarely(int odds = 16) { return byte() % odds == 0; }
  std::int64_t below(std::int64_t count) { return count <= 0 ? 0 : byte() % count; }

  // Mostly small, sometimes wide or extreme.
  std::int64_t integer() {
    switch (byte() % 8) {
      case 5: return static_cast<std::int16_t>(byte() | (byte() << 8));
      case 6: {
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();
        return static_cast<std::int64_t>(bits);
      }
      case 7: {
        static const std::int64_t extremes[] = {std::numeric_limits<std::int64_t>::min(),
                                                std::numeric_limits<std::int64_t>::max(),
                                                std::numeric_limits<std::int32_t>::min(),
                                                std::numeric_limits<std::int32_t>::max(),
                                                -1,
                                                std::int64_t{1} << 31,
                                                std::int64_t{1} << 32,
                                                65535,
                                                65536};
        return extremes[byte() % std::size(extremes)];
      }
      default: return static_cast<std::int64_t>(byte() % 10) - 2;
    }
  }

  double real() {
    switch (byte() % 4) {
      case 0: {
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();
        double value;
        std::memcpy(&value, &bits, sizeof value);
        return value;
      }
      case 1: {
        static const double specials[] = {0.0, -0.0, std::numeric_limits<double>::infinity(),
                                          -std::numeric_limits<double>::infinity(),
                                          std::numeric_limits<double>::quiet_NaN(), 5e-324, 1e-40, 3.5e38, 1.7e308};
        return specials[byte() % std::size(specials)];
      }
      default: return static_cast<double>(static_cast<std::int8_t>(byte())) / 4;
    }
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

class Builder {
 public:
  explicit Builder(ByteReader& bytes) : bytes_(bytes) {}

  ir::Graph build() {
    if (bytes_.rarely(4)) {
      std::size_t length = static_cast<std::size_t>(bytes_.below(8));
      graph_.name.clear();
      for (std::size_t i = 0; i < length; ++i) graph_.name += static_cast<char>(bytes_.byte());
    }
    int count = static_cast<int>(bytes_.below(24));
    int parameters = static_cast<int>(bytes_.below(4));
    for (int id = 0; id < count; ++id) graph_.nodes.push_back(node(id, id < parameters));
    if (bytes_.rarely()) {
      for (int i = static_cast<int>(bytes_.below(4)); i > 0; --i)
        graph_.parameters.push_back(static_cast<ir::ValueId>(bytes_.integer()));
    } else {
      for (int id = 0; id < std::min(parameters, count); ++id) graph_.parameters.push_back(id);
    }
    for (int i = static_cast<int>(bytes_.below(4)); i > 0; --i) {
      if (bytes_.rarely() || count == 0)
        graph_.outputs.push_back(static_cast<ir::ValueId>(bytes_.integer()));
      else
        graph_.outputs.push_back(static_cast<ir::ValueId>(count - 1 - bytes_.below(count)));
    }
    graph_.host_functions.resize(static_cast<std::size_t>(bytes_.below(3)));
    return std::move(graph_);
  }

 private:
  ir::Node node(int id, bool parameter) {
    ir::Node node;
    if (parameter) {
      node.op = Op::parameter;
      node.attributes.index = bytes_.rarely() ? bytes_.integer() : id;
      node.type = random_type();
      return node;
    }
    int op = static_cast<int>(bytes_.below(ir::op_count + 1));
    node.op = static_cast<Op>(op == ir::op_count && bytes_.flag() ? op + bytes_.byte() : op);
    bool known = op < ir::op_count;
    int arity = known ? ir::info(node.op).arity : -1;
    int operands = arity >= 0 && !bytes_.rarely() ? arity : static_cast<int>(bytes_.below(4));
    for (int i = 0; i < operands; ++i)
      node.operands.push_back(id > 0 && !bytes_.rarely() ? static_cast<ir::ValueId>(id - 1 - bytes_.below(id))
                                                         : static_cast<ir::ValueId>(bytes_.integer()));
    if (known && !bytes_.rarely()) attributes_for_kind(node);
    else arbitrary_attributes(node);
    if (bytes_.rarely(8)) node.location = "fuzz.cpp:" + std::to_string(bytes_.byte());
    node.type = random_type();
    if (known && !bytes_.rarely(4)) infer(node, id);
    return node;
  }

  // The operand's type, if the operand exists yet.
  const ir::Type* operand_type(const ir::Node& node, std::size_t index, int id) const {
    if (index >= node.operands.size()) return nullptr;
    ir::ValueId operand = node.operands[index];
    if (operand < 0 || operand >= id) return nullptr;
    return &graph_.nodes[static_cast<std::size_t>(operand)].type;
  }

  int operand_rank(const ir::Node& node) const {
    const ir::Type* type = operand_type(node, 0, static_cast<int>(graph_.nodes.size()));
    return type && type->shape.rank() >= 0 ? type->shape.rank() : 0;
  }

  // Attributes shaped like the op's kind wants them (values still random).
  void attributes_for_kind(ir::Node& node) {
    ir::Attributes& attributes = node.attributes;
    int rank = operand_rank(node);
    switch (ir::info(node.op).attributes) {
      case ir::AttributeKind::none: break;
      case ir::AttributeKind::parameter:
      case ir::AttributeKind::callback: attributes.index = bytes_.rarely() ? bytes_.integer() : bytes_.below(3); break;
      case ir::AttributeKind::constant:
        if (bytes_.flag()) attributes.float_value = bytes_.real();
        else attributes.int_value = bytes_.integer();
        break;
      case ir::AttributeKind::axis: attributes.axis = bytes_.rarely() ? bytes_.integer() : bytes_.below(rank + 2); break;
      case ir::AttributeKind::axis_keepdims:
        attributes.axis = bytes_.rarely() ? bytes_.integer() : bytes_.below(rank + 1);
        attributes.keepdims = bytes_.flag();
        break;
      case ir::AttributeKind::axes_keepdims: attributes.keepdims = bytes_.flag(); [[fallthrough]];
      case ir::AttributeKind::axes: {
        std::uint8_t mask = bytes_.byte();
        for (int axis = 0; axis < std::min(rank + 1, 8); ++axis)
          if (mask & (1u << axis)) attributes.axes.push_back(axis);
        if (bytes_.rarely()) attributes.axes.push_back(bytes_.integer());
        break;
      }
      case ir::AttributeKind::permutation:
        for (int axis = 0; axis < rank; ++axis) attributes.axes.push_back(axis);
        for (std::size_t i = attributes.axes.size(); i > 1; --i)
          std::swap(attributes.axes[i - 1], attributes.axes[static_cast<std::size_t>(bytes_.below(static_cast<std::int64_t>(i)))]);
        if (bytes_.rarely()) attributes.axes.push_back(bytes_.integer());
        break;
      case ir::AttributeKind::slice:
        for (int axis = 0; axis < rank; ++axis) {
          attributes.start.push_back(bytes_.rarely() ? bytes_.integer() : bytes_.below(4));
          std::int64_t step = bytes_.below(7) - 3;
          attributes.step.push_back(bytes_.rarely() ? bytes_.integer() : (step == 0 ? 1 : step));
        }
        break;
      case ir::AttributeKind::matmul:
        attributes.transpose_a = bytes_.flag();
        attributes.transpose_b = bytes_.flag();
        break;
    }
  }

  void arbitrary_attributes(ir::Node& node) {
    ir::Attributes& attributes = node.attributes;
    std::uint8_t fields = bytes_.byte();
    if (fields & 1) attributes.index = bytes_.integer();
    if (fields & 2) attributes.float_value = bytes_.real();
    if (fields & 4) attributes.int_value = bytes_.integer();
    if (fields & 8) attributes.axis = bytes_.integer();
    if (fields & 16)
      for (int i = static_cast<int>(bytes_.below(10)); i > 0; --i) attributes.axes.push_back(bytes_.integer());
    if (fields & 32) attributes.keepdims = bytes_.flag();
    if (fields & 64) {
      for (int i = static_cast<int>(bytes_.below(10)); i > 0; --i) attributes.start.push_back(bytes_.integer());
      for (int i = static_cast<int>(bytes_.below(10)); i > 0; --i) attributes.step.push_back(bytes_.integer());
    }
    if (fields & 128) {
      attributes.transpose_a = bytes_.flag();
      attributes.transpose_b = bytes_.flag();
    }
  }

  std::int64_t dim() {
    switch (bytes_.byte() % 16) {
      case 0: return Shape::dynamic;
      case 1: return bytes_.integer();  // maybe negative or huge
      case 2: return std::int64_t{1} << (bytes_.byte() % 63);
      default: return bytes_.below(5);
    }
  }

  // A shape with these dimensions, valid or not (Shape's constructor would
  // refuse negative ones).
  static Shape any_shape(const std::vector<std::int64_t>& dims) {
    std::vector<std::int64_t> zeros(dims.size(), 0);
    Shape shape{std::span<const std::int64_t>(zeros)};
    for (std::size_t axis = 0; axis < dims.size(); ++axis) shape[static_cast<int>(axis)] = dims[axis];
    return shape;
  }

  Shape shape_of_rank(int rank) {
    std::vector<std::int64_t> dims;
    for (int axis = 0; axis < rank; ++axis) dims.push_back(dim());
    return any_shape(dims);
  }

  ir::Type random_type() {
    ir::Type type;
    type.dtype = static_cast<DType>(bytes_.rarely() ? bytes_.byte() : bytes_.below(dtype_count));
    type.shape = shape_of_rank(static_cast<int>(bytes_.rarely() ? bytes_.below(Shape::max_rank + 1) : bytes_.below(5)));
    return type;
  }

  // What the verifier checks before it runs the type rules (whose int64
  // arithmetic assumes it): a valid dtype, dimensions >= 0 or dynamic, and
  // an element count that fits in int64.
  static bool checkable(const ir::Type& type) {
    if (static_cast<int>(type.dtype) >= dtype_count) return false;
    std::int64_t count = 1;
    for (std::int64_t dim : type.shape.dims()) {
      if (dim < 0 && dim != Shape::dynamic) return false;
      if (dim > 1 && __builtin_mul_overflow(count, dim, &count)) return false;
    }
    return true;
  }

  // The verifier's other precondition for the type rules: slice and concat
  // arithmetic that stays within int64.
  static bool overflows(const ir::Node& node, const std::vector<ir::Type>& operands, const ir::Type& declared) {
    if (node.op == Op::slice && operands.size() == 1) {
      const auto& start = node.attributes.start;
      const auto& step = node.attributes.step;
      for (std::size_t axis = 0; axis < start.size() && axis < step.size(); ++axis) {
        if (static_cast<int>(axis) >= declared.shape.rank()) break;
        std::int64_t count = declared.shape[static_cast<int>(axis)], offset = 0, last = 0;
        if (count != 0 && (__builtin_mul_overflow(count - 1, step[axis], &offset) ||
                          __builtin_add_overflow(start[axis], offset, &last)))
          return true;
      }
    }
    if (node.op == Op::concat) {
      std::int64_t total = 0;
      for (const ir::Type& operand : operands) {
        if (node.attributes.axis < 0 || node.attributes.axis >= operand.shape.rank()) return false;
        std::int64_t dim = operand.shape[static_cast<int>(node.attributes.axis)];
        if (dim > 0 && __builtin_add_overflow(total, dim, &total)) return true;
      }
    }
    return false;
  }

  // Gives the node the type its operands imply (for ops with a declared
  // type: a plausible declared type), if the type rules accept it.
  void infer(ir::Node& node, int id) {
    std::vector<ir::Type> operands;
    for (std::size_t i = 0; i < node.operands.size(); ++i) {
      const ir::Type* type = operand_type(node, i, id);
      if (!type || !checkable(*type)) return;
      operands.push_back(*type);
    }
    ir::Type declared = node.type;
    if (!operands.empty()) {
      switch (node.op) {
        case Op::cast: declared.shape = operands[0].shape; break;
        case Op::reshape:
        case Op::broadcast_to:
          declared.dtype = operands[0].dtype;
          if (bytes_.flag()) declared.shape = operands[0].shape;
          if (node.op == Op::broadcast_to && bytes_.flag() && declared.shape.rank() < Shape::max_rank) {
            std::vector<std::int64_t> dims(declared.shape.dims().begin(), declared.shape.dims().end());
            dims.insert(dims.begin(), bytes_.below(4));
            declared.shape = any_shape(dims);
          }
          break;
        case Op::slice:
          declared.dtype = operands[0].dtype;
          declared.shape = operands[0].shape;
          for (int axis = 0; axis < declared.shape.rank(); ++axis)
            if (bytes_.flag() && declared.shape[axis] > 0) declared.shape[axis] = bytes_.below(declared.shape[axis]) + 1;
          break;
        default: break;
      }
    }
    if (!checkable(declared) || overflows(node, operands, declared)) return;
    try {
      node.type = ir::infer_type(node.op, node.attributes, operands, declared, node.location);
    } catch (const Error&) {
      // Keep the random type: the verifier reports it.
    }
  }

  ByteReader& bytes_;
  ir::Graph graph_;
};

}  // namespace

ir::Graph graph_from_bytes(const std::uint8_t* data, std::size_t size) {
  ByteReader bytes(data, size);
  return Builder(bytes).build();
}

}  // namespace kiln::fuzz
