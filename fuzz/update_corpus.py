#!/usr/bin/env python3
"""Writes the seed corpus of the parser fuzzer: fuzz/corpus/parser/*.ir.

Sources: every raw string literal holding a function (`R"(func @...)"`) in
the IR and JIT tests, and a few graphs from kiln-fuzz (every op, comments),
if a built kiln-fuzz is given:

    fuzz/update_corpus.py [build/tools/kiln-fuzz]
"""
import hashlib
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
corpus = root / "fuzz" / "corpus" / "parser"
corpus.mkdir(parents=True, exist_ok=True)
texts = []
for source in sorted(list((root / "tests" / "ir").glob("*.cpp")) + list((root / "tests" / "jit").glob("*.cpp"))):
    code = source.read_text()
    for match in re.finditer(r'R"\((func @.*?)\)"', code, re.S):
        texts.append(match.group(1))
    # Adjacent plain literals: "func @f(...) {\n" "  %1 = ...\n" ...
    for match in re.finditer(r'(?:"(?:[^"\\\n]|\\.)*"\s*)+', code):
        parts = re.findall(r'"((?:[^"\\\n]|\\.)*)"', match.group(0))
        text = "".join(parts).encode().decode("unicode_escape")
        if text.startswith("func @") and "return" in text:
            texts.append(text)
if len(sys.argv) > 1:
    dump = subprocess.run([sys.argv[1], "--seed", "7", "--count", "24", "--dump", "--batch", "24", "--jobs", "1"],
                          capture_output=True, text=True).stdout
    for graph in re.split(r"^# graph \d+\n", dump, flags=re.M)[1:]:
        texts.append(graph[: graph.find("kiln-fuzz:")] if "kiln-fuzz:" in graph else graph)
for text in texts:
    name = hashlib.sha256(text.encode()).hexdigest()[:16] + ".ir"
    (corpus / name).write_text(text)
print(f"{len(texts)} texts in {corpus}")
