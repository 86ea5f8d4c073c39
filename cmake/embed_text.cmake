# Writes a C++ source defining `const char* const ${SYMBOL}` holding the text of
# INPUTS (separated by |), concatenated in order. Lines `#pragma once` and
# `#include "..."` of files that are themselves embedded are dropped, so the
# result is one self-contained translation-unit prelude. An X-macro table
# (`#include "ir/ops.def"`: a .def file under SOURCE_DIR, meant to be included
# again and again) is put in place of each line including it instead.
#   cmake -DSYMBOL=name -DOUTPUT=file.cpp -DINPUTS="a.h|b.h" -DSOURCE_DIR=src -P embed_text.cmake
set(text "")
string(REPLACE "|" ";" INPUTS "${INPUTS}")
foreach(input IN LISTS INPUTS)
  file(READ "${input}" content)
  string(REGEX MATCHALL "#include \"[^\"]*\\.def\"" tables "${content}")
  foreach(table IN LISTS tables)
    string(REGEX REPLACE "#include \"([^\"]*)\"" "\\1" table_path "${table}")
    file(READ "${SOURCE_DIR}/${table_path}" table_text)
    string(REPLACE "${table}" "${table_text}" content "${content}")
  endforeach()
  string(REGEX REPLACE "#pragma once[^\n]*\n" "" content "${content}")
  string(REGEX REPLACE "#include \"[^\"]*\"[^\n]*\n" "" content "${content}")
  get_filename_component(name "${input}" NAME)
  string(APPEND text "// ---- ${name} ----\n${content}\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUTS} by cmake/embed_text.cmake; do not edit.\nextern const char* const ${SYMBOL};\nconst char* const ${SYMBOL} = R\"kiln_embedded(${text})kiln_embedded\";\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUTPUT}.tmp" "${OUTPUT}")
file(REMOVE "${OUTPUT}.tmp")
