#pragma once
// Training text for head-pattern learning: files matching a glob, tokenized with the model's
// tokenizer, concatenated and cut into fixed-length sequences.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/model.h"

namespace kvscope::learn {

struct TrainingDataOptions {
  int64_t seq_len = 1024;  ///< tokens per training sequence (>= 2)
  int64_t max_tokens = 0;  ///< stop reading files once this many tokens are collected (0 = read all)
  uint64_t seed = 0;       ///< order in which files are read (shuffled), so max_tokens samples all of them
  bool add_bos = true;     ///< put the model's BOS id in front of every file's tokens (when it has one)
};

/// Token sequences cut from the training files.
struct TrainingData {
  at::Tensor sequences;                      ///< int64 [n_sequences, seq_len] on CPU
  std::vector<std::filesystem::path> files;  ///< files read, in reading order
  int64_t n_files_matched = 0;               ///< files the glob matched (>= files.size() with max_tokens)
  int64_t n_tokens = 0;                      ///< tokens read (the tail that fills no sequence is dropped)
};

/// Reads every regular file matching `glob` (file_glob.h), encodes it with `model.tokenizer`
/// (BOS first when options.add_bos and the model has a BOS id), concatenates the files in a
/// seed-shuffled order and cuts the stream into non-overlapping sequences of options.seq_len.
/// Throws InputError naming the glob when nothing matches or fewer than seq_len tokens result,
/// InputError(file, ...) for an unreadable file, InputError when the model has no tokenizer.
TrainingData load_training_data(const std::string& glob, const Model& model, const TrainingDataOptions& options);

}  // namespace kvscope::learn
