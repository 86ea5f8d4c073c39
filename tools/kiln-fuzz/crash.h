#pragma once
// Crashes. kiln-fuzz runs graphs in its own process (one JIT compile per
// batch), so a crash of the compiler or an executor (a signal) kills it. The
// handler prints what the crashing thread was running, then re-executes
// kiln-fuzz with a command line set beforehand (e.g. --find-crash for the
// batch), which finds and shrinks the crashing graph in child processes: a
// candidate "still fails" when `kiln-fuzz --replay` on it dies of a signal.

#include "fuzz_case.h"

#include <string>
#include <vector>

namespace kiln::fuzz {

// What the calling thread runs now, printed if it crashes.
void set_crash_context(std::string text);
const std::string& crash_context();

// After printing, the handler execs kiln-fuzz with `arguments` (argv[1..]);
// empty: it dies of the signal. Set it while no other thread runs graphs.
void set_crash_command(const std::vector<std::string>& arguments);

// Handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT.
void install_crash_handlers();

// Runs this kiln-fuzz executable with `arguments` (argv[1..]), its output
// discarded; true if it died of a signal (or ran past `timeout_seconds`).
bool child_crashes(const std::vector<std::string>& arguments, int timeout_seconds = 300);

// True if `kiln-fuzz --replay` of the case (written to a temporary file with
// its inputs), with the arguments that select the check (--executors LIST,
// --gradients), dies of a signal.
bool crashes_in_child(const FuzzCase& fuzz_case, const std::vector<std::string>& check_arguments);

}  // namespace kiln::fuzz
