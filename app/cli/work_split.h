#pragma once
// How sweep and eval split their items: --shard i/n (every n-th item from i) and --devices (one
// worker process per GPU).
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::cli {

/// A shard of a list of items: items index, index + count, ...
struct Shard {
  uint64_t index = 0;
  uint64_t count = 1;
};

/// "i/n" with 0 <= i < n as a Shard; "" is the whole list (0/1). Throws InputError("--shard must
/// be i/n with 0 <= i < n (got '...')") for anything else.
Shard parse_shard(const std::string& text);

/// "0,1,3" as the devices "cuda:0", "cuda:1", "cuda:3"; "" is none. Checks the syntax only (ids,
/// no repeats): asking CUDA how many devices there are would initialise it in this process, and a
/// worker forked afterwards could not use it; each worker checks its device when it loads the
/// model. Throws InputError("--devices must be CUDA device ids ...") otherwise.
std::vector<std::string> parse_devices(const std::string& text);

}  // namespace kvscope::cli
