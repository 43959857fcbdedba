// Bad checkpoints fail with an InputError that names the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"
#include "kvscope/core/safetensors.h"
#include "test_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

/// A scratch copy of pycode-16m that a test may damage.
class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvscope_bad_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    test::remove_tree(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(test::pycode_dir() / f, dir_ / f);
    fs::permissions(dir_ / "config.json", fs::perms::owner_write, fs::perm_options::add);
    fs::permissions(dir_ / "model.safetensors", fs::perms::owner_write, fs::perm_options::add);
  }
  void TearDown() override { test::remove_tree(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name, std::ios::binary) << text; }
  /// Asserts load_model throws InputError mentioning `file` and `problem`.
  void expect_error(const fs::path& file, const std::string& problem) {
    try {
      load_model(dir_, LoadOptions{});
      FAIL() << "expected an InputError about " << problem;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file.string()), std::string::npos) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  }
  fs::path dir_;
};

TEST_F(DamagedCheckpoint, MissingDirectory) {
  test::remove_tree(dir_);
  expect_error(dir_, "no such file");
}

TEST_F(DamagedCheckpoint, MissingWeights) {
  fs::remove(dir_ / "model.safetensors");
  expect_error(dir_, "no model.safetensors");
}

TEST_F(DamagedCheckpoint, TruncatedSafetensors) {
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") / 2);
  expect_error(dir_ / "model.safetensors", "truncated safetensors");
}

TEST_F(DamagedCheckpoint, TruncatedHeader) {
  fs::resize_file(dir_ / "model.safetensors", 100);
  expect_error(dir_ / "model.safetensors", "truncated safetensors");
}

TEST_F(DamagedCheckpoint, ShapeMismatchWithConfig) {
  auto cfg = test::read_json(dir_ / "config.json");
  cfg["intermediate_size"] = 1000;
  write("config.json", cfg.dump());
  expect_error(dir_ / "model.safetensors",
               "mlp.gate_proj.weight' has shape [1024, 384], config.json implies [1000, 384]");
}

TEST_F(DamagedCheckpoint, UnknownModelType) {
  auto cfg = test::read_json(dir_ / "config.json");
  cfg["model_type"] = "gpt2";
  write("config.json", cfg.dump());
  expect_error(dir_ / "config.json", "unknown model_type 'gpt2'");
}

TEST_F(DamagedCheckpoint, BadJson) {
  write("config.json", "{\"model_type\": \"llama\", ");
  expect_error(dir_ / "config.json", "not valid JSON");
}

TEST_F(DamagedCheckpoint, InconsistentHeads) {
  auto cfg = test::read_json(dir_ / "config.json");
  cfg["num_key_value_heads"] = 4;
  write("config.json", cfg.dump());
  expect_error(dir_ / "config.json", "not a multiple of num_key_value_heads");
}

TEST_F(DamagedCheckpoint, MissingShardOfIndex) {
  write("model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  expect_error(dir_ / "model-00001-of-00002.safetensors", "no such file");
}

TEST_F(DamagedCheckpoint, TruncatedLlama2c) {
  const fs::path bin = dir_ / "stories260K.bin";
  fs::copy_file(test::stories_dir() / "stories260K.bin", bin);
  fs::permissions(bin, fs::perms::owner_write, fs::perm_options::add);
  fs::resize_file(bin, 5000);
  try {
    load_model(bin, LoadOptions{});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(bin.string() + ": truncated llama2.c checkpoint"), std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, ShardedIndexLoadsTheSameTensors) {
  // An index over the single file is a valid one-shard checkpoint.
  const fs::path dir = fs::temp_directory_path() / ("kvscope_shard_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(test::pycode_dir() / "model.safetensors", dir / "shard-1.safetensors",
                fs::copy_options::overwrite_existing);
  const SafetensorsFile single(test::pycode_dir() / "model.safetensors");
  nlohmann::json index;
  for (const auto& [name, e] : single.entries()) index["weight_map"][name] = "shard-1.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  const SafetensorsCheckpoint ckpt(dir);
  EXPECT_EQ(ckpt.names().size(), single.entries().size());
  EXPECT_TRUE(ckpt.tensor("model.norm.weight").equal(single.tensor("model.norm.weight")));
  EXPECT_EQ(ckpt.tensor("model.embed_tokens.weight").scalar_type(), at::kBFloat16);
  test::remove_tree(dir);
}

}  // namespace
}  // namespace kvscope
