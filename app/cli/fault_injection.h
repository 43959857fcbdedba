#pragma once
// Test-only fault injection for the CLI, from the environment (tests/cli/test_cli_faults.cpp):
//   KVSCOPE_TEST_FAULT=oom@prefill     the prefill fails as if the device ran out of memory
//   KVSCOPE_TEST_FAULT=oom@decode:N    decode step N fails so
//   KVSCOPE_TEST_FAULT=torch@prefill   a real LibTorch error (an index out of range, with its stack trace)
// Unset (always, outside tests): no hook.
#include <cstdint>
#include <functional>
#include <string_view>

namespace kvscope::cli {

/// The GenerateRequest::fault_hook that KVSCOPE_TEST_FAULT asks for, or an empty function.
/// Throws InputError for a value it does not understand.
std::function<void(std::string_view phase, int64_t step)> fault_hook_from_environment();

}  // namespace kvscope::cli
