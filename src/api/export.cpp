// kiln::export_function: traces a function for one signature, lowers it as the
// JIT would, and writes the generated kernels with the files a program builds
// them with (include/kiln/export.h says which). What the program runs them
// with is exported_call.cpp.

#include "api/file_access.h"
#include "api/tracing.h"
#include "compiler/jit.h"
#include "ir/parser.h"
#include "ir/printer.h"

#include <kiln/error.h>
#include <kiln/export.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

namespace kiln::detail {
namespace {

const char* const export_op = "kiln::export_function";

void check_name(const std::string& name, const Location& location) {
  const bool identifier = !name.empty() && name.size() <= 64 &&
                          (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                          std::all_of(name.begin(), name.end(),
                                      [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!identifier)
    throw ValueError(export_op,
                     "the name '" + name +
                         "' is not a C identifier of at most 64 characters (letters, digits and '_', not starting "
                         "with a digit): it names the exported function, its files and its CMake target",
                     kiln::to_string(location));
  if (name.starts_with("kiln"))
    throw ValueError(export_op, "the name '" + name + "' starts with 'kiln', which kiln's own symbols use",
                     kiln::to_string(location));
}

// The C type of a pointer to one element of `dtype` in the C header.
std::string c_type(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return "bool";
    case DType::i32:
      return "int32_t";
    case DType::i64:
      return "int64_t";
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
    case DType::bf16:  // the 16 bits of each element
    case DType::f16:
      return "uint16_t";
  }
  return "void";
}

// The enumerator's spelling in C++ (bool's is `boolean`: the keyword cannot be one).
std::string cpp_dtype(DType dtype) {
  return "kiln::DType::" + (dtype == DType::boolean ? std::string("boolean") : std::string(to_string(dtype)));
}

// `text` as a C++ raw string literal, with a delimiter it does not contain.
std::string raw_literal(const std::string& text) {
  std::string delimiter = "kiln_ir";
  while (text.find(")" + delimiter + "\"") != std::string::npos) delimiter += "_";
  return "R\"" + delimiter + "(" + text + ")" + delimiter + "\"";
}

// `text` as a C string literal (for a line such as "main.cpp:12").
std::string string_literal(const std::string& text) {
  std::string literal = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') literal += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\%03o", static_cast<unsigned>(static_cast<unsigned char>(c)));
      literal += escaped;
    } else {
      literal += c;
    }
  }
  return literal + "\"";
}

// The entry points of module `module` (ExportedSource::modules) are named <prefix><k>.
std::string entry_prefix(const std::string& name, std::size_t module) {
  return module == 0 ? name + "_kernel_" : name + "_module_" + std::to_string(module) + "_kernel_";
}

// The parameters and results of the exported function, as the headers describe them.
struct Interface {
  std::vector<ir::Type> inputs, outputs;
};

std::string describe(const std::vector<ir::Type>& types, const char* prefix) {
  std::string text;
  for (std::size_t i = 0; i < types.size(); ++i)
    text += (i ? ", " : "") + std::string(prefix) + std::to_string(i) + " " + types[i].to_string();
  return text.empty() ? "none" : text;
}

// The C entry point's parameters: a pointer to each input's elements, then to each output's ("void" for none).
std::string c_parameters(const Interface& interface) {
  std::string parameters;
  for (std::size_t i = 0; i < interface.inputs.size(); ++i)
    parameters += "const " + c_type(interface.inputs[i].dtype) + "* input" + std::to_string(i) + ", ";
  for (std::size_t i = 0; i < interface.outputs.size(); ++i)
    parameters += c_type(interface.outputs[i].dtype) + "* output" + std::to_string(i) + ", ";
  return parameters.empty() ? "void" : parameters.substr(0, parameters.size() - 2);
}

std::string c_header(const std::string& name, const Interface& interface, const std::string& exported_at) {
  std::string guard = "KILN_EXPORTED_" + name + "_C_H";
  for (char& c : guard) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "/* " + name + ": a function exported by kiln::export_function (" + exported_at +
         "), callable from C.\n"
         "   Generated: edit the function and export it again rather than this file. */\n"
         "#ifndef " +
         guard + "\n#define " + guard +
         "\n\n#include <stdbool.h>\n#include <stdint.h>\n\n"
         "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
         "/* Inputs: " +
         describe(interface.inputs, "input") +
         ".\n"
         "   Outputs: " +
         describe(interface.outputs, "output") +
         ".\n"
         "   Each array is dense and row-major, of its type's elements; the outputs are written by the call.\n"
         "   Returns 0, or -1 when the call failed: then " +
         name +
         "_c_error() says why. Safe to call from\n"
         "   several threads at once. */\n"
         "int " +
         name + "_c(" + c_parameters(interface) +
         ");\n\n"
         "/* The message of this thread's last failed call of " +
         name +
         "_c. */\n"
         "const char* " +
         name +
         "_c_error(void);\n\n"
         "#ifdef __cplusplus\n}  /* extern \"C\" */\n#endif\n\n#endif\n";
}

std::string result_type(const Interface& interface) {
  if (interface.outputs.size() == 1) return "kiln::Tensor";
  std::string tuple = "std::tuple<";
  for (std::size_t i = 0; i < interface.outputs.size(); ++i) tuple += i ? ", kiln::Tensor" : "kiln::Tensor";
  return tuple + ">";
}

std::string cpp_parameters(const Interface& interface) {
  std::string parameters;
  for (std::size_t i = 0; i < interface.inputs.size(); ++i)
    parameters += "const kiln::Tensor& input" + std::to_string(i) + ", ";
  return parameters;
}

std::string cpp_header(const std::string& name, const Interface& interface, const std::string& exported_at) {
  return "#pragma once\n// " + name + ": a function exported by kiln::export_function (" + exported_at +
         ").\n// Generated: edit the function and export it again rather than this file.\n\n"
         "#include \"" +
         name +
         "_c.h\"\n\n#include <kiln/tensor.h>\n\n#include <tuple>\n\n"
         "// Inputs: " +
         describe(interface.inputs, "input") +
         ", on the CPU.\n"
         "// Outputs: " +
         describe(interface.outputs, "output") +
         ".\n"
         "// Computes what the kiln::function would compile for these inputs, with no compiler or tracer at run\n"
         "// time. Errors (other inputs, a kiln other than the one that exported it) are kiln::Errors naming the\n"
         "// line of the call.\n" +
         result_type(interface) + " " + name + "(" + cpp_parameters(interface) +
         "kiln::Location location = kiln::Location::current());\n";
}

// The bytes of a captured tensor as an array initializer, 16 per line.
std::string byte_lines(const runtime::Array& array) {
  const auto* bytes = static_cast<const unsigned char*>(array.raw());
  std::string text;
  text.reserve(array.bytes() * 5 + array.bytes() / 16 * 4);
  char hex[8];
  for (std::size_t i = 0; i < array.bytes(); ++i) {
    if (i % 16 == 0) text += "\n    ";
    std::snprintf(hex, sizeof hex, "0x%02x,", static_cast<unsigned>(bytes[i]));
    text += hex;
  }
  return text;
}

std::string source_file(const std::string& name, const Interface& interface, const std::string& exported_at,
                        const std::string& graph, const compiler::ExportedSource& exported,
                        const std::vector<runtime::Array>& constants) {
  std::string text = "// " + name + ": a function exported by kiln::export_function (" + exported_at +
                     "): its graph, its kernel table and its constants, and the functions " + name + ".h and " + name +
                     "_c.h declare.\n// Generated: edit the function and export it again rather than this file.\n\n"
                     "#include \"" +
                     name +
                     ".h\"\n\n#include <kiln/export.h>\n\n#include <array>\n#include <cstdint>\n"
                     "#include <utility>\n#include <vector>\n\n";
  // The kernels of <name>_kernels.cpp (and of the regions' files), in the order load_exported takes them.
  std::string declarations, table;
  for (std::size_t k = 0, local = 0; k < exported.generated.size(); ++k, ++local) {
    if (k > 0 && exported.module_of_kernel[k] != exported.module_of_kernel[k - 1]) local = 0;
    const bool driver = exported.driver[k];
    const std::string entry =
        entry_prefix(name, exported.module_of_kernel[k]) + (driver ? std::string("loop") : std::to_string(local));
    if (exported.generated[k])
      declarations += "void " + entry + "(const kiln_runtime* runtime, void* const* buffers);\n";
    table +=
        "    " + (exported.generated[k] ? entry : std::string("nullptr")) + ",  // " +
        (driver ? "the loop of module " + std::to_string(exported.module_of_kernel[k]) + ": its driver"
                : "kernel " + std::to_string(k) + (exported.generated[k] ? "" : " (a library kernel: kiln runs it)")) +
        "\n";
  }
  if (!declarations.empty()) text += "extern \"C\" {\n" + declarations + "}\n\n";
  text +=
      "namespace {\n\n// The traced graph, which kiln lowers again at the first call and checks against the "
      "kernels below.\nconst char graph[] = " +
      raw_literal(graph) + ";\n\n";
  if (!table.empty()) text += "const kiln::detail::ExportedKernel kernels[] = {\n" + table + "};\n\n";
  std::string constant_table;
  for (std::size_t c = 0; c < constants.size(); ++c) {
    const runtime::Array& constant = constants[c];
    const std::string id = "constant_" + std::to_string(c);
    std::string dimensions;
    for (std::int64_t dimension : constant.shape.dims()) dimensions += std::to_string(dimension) + ", ";
    text += "// A captured tensor, " + ir::Type{constant.dtype, constant.shape}.to_string() + ", as it was exported.\n";
    text += "const std::int64_t " + id + "_dimensions[] = {" + dimensions + "0};\n";
    text += "alignas(64) const unsigned char " + id + "[] = {" + byte_lines(constant) + "\n    0};\n\n";
    constant_table += "    {" + cpp_dtype(constant.dtype) + ", " + std::to_string(constant.shape.rank()) + ", " + id +
                      "_dimensions, " + id + "},\n";
  }
  if (!constant_table.empty())
    text += "const kiln::detail::ExportedConstant constants[] = {\n" + constant_table + "};\n\n";
  text += "const kiln::detail::ExportedFunction function = {\n    " + string_literal(name) + ",\n    " +
          string_literal(exported_at) + ",\n    graph,\n    \"" + exported.digest + "\",\n    " +
          (table.empty() ? "nullptr" : "kernels") + ",\n    " + std::to_string(exported.generated.size()) + ",\n    " +
          (constant_table.empty() ? "nullptr" : "constants") + ",\n    " + std::to_string(constants.size()) +
          ",\n};\n\n}  // namespace\n\n";

  // The C++ entry point.
  const std::string inputs_list = [&] {
    std::string list;
    for (std::size_t i = 0; i < interface.inputs.size(); ++i) list += (i ? ", input" : "input") + std::to_string(i);
    return list;
  }();
  text += result_type(interface) + " " + name + "(" + cpp_parameters(interface) + "kiln::Location location) {\n" +
          "  std::vector<kiln::Tensor> outputs = kiln::detail::call_exported(function, {" + inputs_list +
          "}, location);\n";
  if (interface.outputs.size() == 1) {
    text += "  return std::move(outputs[0]);\n}\n\n";
  } else {
    text += "  return {";
    for (std::size_t i = 0; i < interface.outputs.size(); ++i)
      text += (i ? ", " : "") + std::string("std::move(outputs[") + std::to_string(i) + "])";
    text += "};\n}\n\n";
  }
  // The C entry point.
  std::string c_inputs, c_outputs;
  for (std::size_t i = 0; i < interface.inputs.size(); ++i) c_inputs += (i ? ", input" : "input") + std::to_string(i);
  for (std::size_t i = 0; i < interface.outputs.size(); ++i)
    c_outputs += (i ? ", output" : "output") + std::to_string(i);
  text += "extern \"C\" int " + name + "_c(" + c_parameters(interface) + ") {\n" + "  const std::array<const void*, " +
          std::to_string(interface.inputs.size()) + "> inputs = {" + c_inputs + "};\n  const std::array<void*, " +
          std::to_string(interface.outputs.size()) + "> outputs = {" + c_outputs +
          "};\n  return kiln::detail::call_exported_raw(function, inputs.data(), outputs.data());\n}\n\n";
  text += "extern \"C\" const char* " + name + "_c_error(void) { return kiln::detail::exported_error(); }\n";
  return text;
}

// `source` with each entry point kiln_kernel_<digits> (not the kiln_kernel_entry type) named <prefix><digits>, and a
// loop's driver, kiln_loop, <prefix>loop.
std::string rename_entry_points(const std::string& source, const std::string& prefix) {
  auto identifier = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  // `name` followed by digits (`numbered`) or standing alone, as a whole identifier, replaced by `replacement`
  // (followed by the digits).
  auto rename = [&](const std::string& text, const std::string& name, bool numbered, const std::string& replacement) {
    std::string renamed;
    std::size_t done = 0;
    for (std::size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + name.size())) {
      const std::size_t digits = at + name.size();
      std::size_t end = digits;
      while (numbered && end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      const bool whole = (at == 0 || !identifier(text[at - 1])) && (!numbered || end > digits) &&
                         (end == text.size() || !identifier(text[end]));
      if (!whole) continue;
      renamed += text.substr(done, at - done) + replacement + text.substr(digits, end - digits);
      done = end;
    }
    return renamed + text.substr(done);
  };
  return rename(rename(source, "kiln_kernel_", true, prefix), "kiln_loop", false, prefix + "loop");
}

// Module `module`'s kernels file: the function's own (0), or a region's.
std::string kernels_file_name(const std::string& name, std::size_t module) {
  return name + "_kernels" + (module == 0 ? std::string() : "_" + std::to_string(module)) + ".cpp";
}

std::string kernels_file(const std::string& name, const std::string& exported_at,
                         const compiler::ExportedSource& exported, std::size_t module) {
  std::string flags;
  for (const std::string& flag : exported.flags) flags += " " + flag;
  // The JIT's entry points are kiln_kernel_<k> in every module; a program may hold several exported functions,
  // and a function with control flow a module per branch and loop body.
  const std::string prefix = entry_prefix(name, module);
  const std::string source = rename_entry_points(exported.modules.at(module), prefix);
  const std::string what =
      module == 0 ? "The kernels of " + name
                  : "The kernels of a branch or loop body of " + name + " (module " + std::to_string(module) + ")";
  return "// " + what + ", exported by kiln::export_function (" + exported_at +
         "): the source the JIT compiles\n// (get_compiler_ir(Stage::source)), with its entry points named " + prefix +
         "<k>. " + name + ".cmake compiles it with the JIT's flags:\n//  " + flags + "\n\n" + source;
}

std::string cmake_file(const std::string& name, const std::string& exported_at,
                       const compiler::ExportedSource& exported) {
  std::string flags;
  for (const std::string& flag : exported.flags) flags += (flags.empty() ? "" : ";") + flag;
  std::string kernel_files;
  for (std::size_t module = 0; module < exported.modules.size(); ++module)
    kernel_files += " ${CMAKE_CURRENT_LIST_DIR}/" + kernels_file_name(name, module);
  return "# " + name + ": a function exported by kiln::export_function (" + exported_at +
         ").\n# include() this file after find_package(kiln) (or add_subdirectory of kiln), then link the static "
         "library\n# target `" +
         name + "`: its header is " + name + ".h (C++) or " + name +
         "_c.h (C).\n"
         "add_library(" +
         name + " STATIC ${CMAKE_CURRENT_LIST_DIR}/" + name + ".cpp" + kernel_files +
         ")\n"
         "target_include_directories(" +
         name +
         " PUBLIC ${CMAKE_CURRENT_LIST_DIR})\n"
         "target_compile_features(" +
         name +
         " PUBLIC cxx_std_20)\n"
         "# The kernels compiled as the JIT compiles them (the same language, ISA and floating-point semantics), "
         "so the\n# program computes what the JIT computes, bit for bit.\n"
         "set_source_files_properties(" +
         kernel_files + " PROPERTIES COMPILE_OPTIONS \"" + flags +
         "\")\n"
         "target_link_libraries(" +
         name + " PUBLIC kiln::kiln m)\n";
}

void write_file(const std::filesystem::path& path, const std::string& text, const Location& location) {
  const FileOperation operation(export_op, path, location);
  OutputFile file(path, operation);
  file.write(text);
  file.finish();
}

}  // namespace

ExportedFiles export_traced(const TraceBody& body, const std::vector<Tensor>& tensors,
                            const std::vector<StaticValue>& statics, const ExportOptions& options,
                            const Location& location) {
  const std::string line = kiln::to_string(location);
  check_name(options.name, location);
  if (options.directory.empty())
    throw ValueError(export_op, "no directory to write to (ExportOptions::directory is empty)", line);
  const trace::Signature signature = signature_of(export_op, line, tensors, statics);
  for (const trace::ArgumentType& argument : signature.arguments)
    if (!argument.device.is_cpu())
      throw CompileError(export_op,
                         "exports CPU code only; the example inputs are on " + argument.device.to_string() +
                             " (pass CPU tensors of the same dtypes and shapes)",
                         line);
  const std::string op = std::string(export_op) + " '" + options.name + "'";
  std::shared_ptr<trace::ConcreteFunction> concrete = trace_concrete(options.name, op, line, signature, body);
  compiler::ExportedSource exported;
  try {
    exported = compiler::export_source(concrete->traced);
  } catch (const CompileError& error) {
    const std::string where = error.location().empty() ? std::string() : " at " + error.location();
    throw CompileError(op,
                       "cannot compile for inputs " + signature.to_string() + ": " + error.detail() + " (op '" +
                           error.op() + "'" + where + ")",
                       line);
  }
  // What the program's first call lowers: the graph's text, which must lower to the very same kernels.
  const std::string graph = ir::print(concrete->traced, {.locations = true});
  if (compiler::export_source(ir::parse(graph)).digest != exported.digest)
    throw CompileError(op, "the graph's text form does not lower to the same kernels (a kiln bug: please report it)",
                       line);

  Interface interface;
  const std::size_t input_count = concrete->traced.parameters.size() - concrete->captures.size();
  for (std::size_t i = 0; i < input_count; ++i)
    interface.inputs.push_back(concrete->traced.type(concrete->traced.parameters[i]));
  for (ir::ValueId output : concrete->traced.outputs) interface.outputs.push_back(concrete->traced.type(output));

  const std::filesystem::path directory(options.directory);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error)
    throw IOError(export_op, "cannot create the directory '" + options.directory + "': " + error.message(), line);
  ExportedFiles files;
  files.header = (directory / (options.name + ".h")).string();
  files.c_header = (directory / (options.name + "_c.h")).string();
  files.source = (directory / (options.name + ".cpp")).string();
  files.kernels = (directory / kernels_file_name(options.name, 0)).string();
  files.cmake = (directory / (options.name + ".cmake")).string();
  files.kernel_count = exported.kernels_per_call;
  write_file(files.c_header, c_header(options.name, interface, line), location);
  write_file(files.header, cpp_header(options.name, interface, line), location);
  write_file(files.source, source_file(options.name, interface, line, graph, exported, concrete->captures), location);
  write_file(files.kernels, kernels_file(options.name, line, exported, 0), location);
  for (std::size_t module = 1; module < exported.modules.size(); ++module) {
    files.region_kernels.push_back((directory / kernels_file_name(options.name, module)).string());
    write_file(files.region_kernels.back(), kernels_file(options.name, line, exported, module), location);
  }
  write_file(files.cmake, cmake_file(options.name, line, exported), location);
  return files;
}

}  // namespace kiln::detail
