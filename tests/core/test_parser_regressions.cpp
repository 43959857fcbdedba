// Inputs that crashed, reached undefined behaviour or escaped with an unclear error in the file
// parsers (found by the libFuzzer targets in tests/fuzz or while writing them; docs/reliability.md).
// Each now fails with an InputError naming the file and what is wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/model.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/safetensors.h"
#include "kvscope/core/tokenizer.h"
#include "test_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

class ParserRegressions : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvscope_parsers_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    test::remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { test::remove_tree(dir_); }
  fs::path write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return dir_ / name;
  }
  /// A safetensors file: u64 header length, the header, then `data_bytes` zero bytes.
  fs::path write_safetensors(const std::string& name, const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    return write(name, bytes + header + std::string(data_bytes, '\0'));
  }
  template <class Fn>
  static void expect_input_error(Fn&& fn, const fs::path& file, const std::string& problem) {
    try {
      fn();
      ADD_FAILURE() << "expected an InputError about " << problem;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file.string() + ": "), std::string::npos) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  }
  fs::path dir_;
};

// The product of the dimensions wrapped around 2^64 to 0 and matched an empty byte range; the
// tensor view would then have read 2^64 elements from the mapping.
TEST_F(ParserRegressions, SafetensorsShapeWhoseSizeOverflows) {
  const auto f = write_safetensors("model.safetensors",
                                   R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
  expect_input_error([&] { SafetensorsFile{f}; }, f, "tensor 'w': shape [4294967296, 4294967296] x F32 is too large");
}

// fuzz_safetensors_index: a number beyond double (1e99999) made nlohmann throw out_of_range,
// which no caller caught as a file error: the message did not name the file.
TEST_F(ParserRegressions, JsonNumberBeyondDoubleInAnyJsonFile) {
  write("model.safetensors.index.json", R"({"metadata":{"total_size":29E99999},"weight_map":{}})");
  expect_input_error([&] { SafetensorsCheckpoint{dir_}; }, dir_ / "model.safetensors.index.json", "not valid JSON");
  const auto config = write("config.json", R"({"model_type":"llama","vocab_size":1e99999})");
  expect_input_error([&] { parse_hf_config(config); }, config, "not valid JSON");
  const auto tokenizer = write("tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":1e400},"merges":[]}})");
  expect_input_error([&] { load_hf_tokenizer(tokenizer); }, tokenizer, "not valid JSON");
  const auto header = write_safetensors("h.safetensors", R"({"__metadata__":{"x":-1e99999}})", 0);
  expect_input_error([&] { SafetensorsFile{header}; }, header, "safetensors header is not valid JSON");
}

// A field of the wrong type made nlohmann's value() throw type_error past every handler: the
// message named no file.
TEST_F(ParserRegressions, ConfigFieldOfTheWrongType) {
  auto text = test::read_text(test::pycode_dir() / "config.json");
  text.replace(text.find("1e-05"), 5, "\"tiny\"");
  const auto config = write("config.json", text);
  expect_input_error([&] { parse_hf_config(config); }, config, "malformed config: [json.exception.type_error.302]");
}

// Dimensions near 2^40 overflowed int64 in parameter_count() (undefined behaviour).
TEST_F(ParserRegressions, ConfigDimensionsBeyondAnyModel) {
  auto j = test::read_json(test::pycode_dir() / "config.json");
  j["hidden_size"] = int64_t{1} << 40;
  auto config = write("config.json", j.dump());
  expect_input_error([&] { parse_hf_config(config); }, config, "hidden_size must be < 2^31 (got 1099511627776)");
  j = test::read_json(test::pycode_dir() / "config.json");
  j["hidden_size"] = j["intermediate_size"] = j["vocab_size"] = j["num_hidden_layers"] = int64_t{1} << 30;
  config = write("config.json", j.dump());
  expect_input_error([&] { parse_hf_config(config); }, config, "the shapes imply more than 2^60 parameters");
}

// fuzz_tokenizer_json: an id near 2^31 resized the id -> token table to 68 GB.
TEST_F(ParserRegressions, TokenizerIdFarBeyondAnyVocabulary) {
  const auto f = write("tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":0,"b":2147483000},"merges":[]}})");
  expect_input_error([&] { load_hf_tokenizer(f); }, f, "token id 2147483000 for 'b' is beyond 4194304");
  const auto g = write("tokenizer2.json", R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},
                                             "added_tokens":[{"id":2000000000,"content":"<x>"}]})");
  expect_input_error([&] { load_hf_tokenizer(g); }, g, "token id 2000000000 for '<x>' is beyond");
}

// fuzz_tokenizer_json (the 16-core campaign, 2026-11-26): a Strip decoder's "start" of 1.92234e+19
// went through nlohmann's value<size_t>, a float-to-integer cast out of range (undefined behaviour).
TEST_F(ParserRegressions, StripDecoderCountsThatAreNoCount) {
  for (const std::string start : {"1.92234e+19", "-1", "0.5", "\"2\""}) {
    SCOPED_TRACE(start);
    const auto f = write("tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},
        "decoder":{"type":"Strip","content":" ","start":)" +
                                               start + R"(,"stop":0}})");
    expect_input_error([&] { load_hf_tokenizer(f); }, f, "Strip decoder 'start' must be an integer in [0, 2^31)");
  }
  const auto ok = write("ok.json", R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},
      "decoder":{"type":"Strip","content":"a","start":1,"stop":0}})");
  const std::vector<int32_t> ids = {0, 0};
  EXPECT_EQ(load_hf_tokenizer(ok)->decode(ids), "");  // each token "a" loses its one leading "a"
}

// fuzz_tokenizer_json (the CI fuzz stage): nlohmann's get<int>() of the float 1.98922e+24 is a
// float-to-int cast out of range, undefined behaviour. The same cast sat in every integer field
// read with get<> / value<>: safetensors shapes and offsets, config.json sizes, head patterns.
TEST_F(ParserRegressions, FloatsWhereIntegersBelong) {
  const auto tokenizer =
      write("tokenizer.json", R"({"model":{"type":"BPE","vocab":{"a":0,"b":1.98922e+24},"merges":[]}})");
  expect_input_error([&] { load_hf_tokenizer(tokenizer); }, tokenizer,
                     "vocab entry 'b' has id 1.98922e+24, not a 32-bit integer");
  const auto added =
      write("added.json",
            R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"id":0.5,"content":"<x>"}]})");
  expect_input_error([&] { load_hf_tokenizer(added); }, added, "added token \"<x>\" has id 0.5, not a 32-bit integer");
  const auto st =
      write_safetensors("model.safetensors", R"({"w":{"dtype":"F32","shape":[1e30],"data_offsets":[0,4]}})", 4);
  expect_input_error([&] { SafetensorsFile{st}; }, st, "tensor 'w': shape entry 1e+30 is not a non-negative integer");
  const auto off =
      write_safetensors("off.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4);
  expect_input_error([&] { SafetensorsFile{off}; }, off, "tensor 'w': data_offsets [0,-4] are not byte offsets");
  auto j = test::read_json(test::pycode_dir() / "config.json");
  j["max_position_embeddings"] = 1e300;
  const auto config = write("config.json", j.dump());
  expect_input_error([&] { parse_hf_config(config); }, config,
                     "'max_position_embeddings' must be an integer (got 1e+300)");
}

// Config values that cannot be were loaded: rms_norm_eps <= 0 gave NaN logits and an empty
// output with exit 0; a zero or negative context ran on. Each is refused at load, naming the key.
TEST_F(ParserRegressions, ConfigValuesThatCannotBeAreRefused) {
  const std::vector<std::pair<std::pair<std::string, nlohmann::json>, std::string>> cases = {
      {{"rms_norm_eps", 0.0}, "rms_norm_eps must be a finite number > 0 (got 0)"},
      {{"rms_norm_eps", -1e-6}, "rms_norm_eps must be a finite number > 0 (got -1e-06)"},
      {{"max_position_embeddings", 0}, "max_position_embeddings must be > 0 (got 0)"},
      {{"max_position_embeddings", -4096}, "max_position_embeddings must be > 0 (got -4096)"},
      {{"rope_theta", -1.0}, "rope_theta must be a finite number > 0 (got -1)"},
  };
  for (const auto& [field, problem] : cases) {
    SCOPED_TRACE(field.first);
    auto j = test::read_json(test::pycode_dir() / "config.json");
    if (field.first == "rope_theta")
      j["rope_parameters"]["rope_theta"] = field.second;  // transformers 5 writes it there
    else
      j[field.first] = field.second;
    const auto config = write("config.json", j.dump());
    expect_input_error([&] { parse_hf_config(config); }, config, problem);
  }
  auto ok = test::read_json(test::pycode_dir() / "config.json");
  ok["rms_norm_eps"] = 1e-5;
  EXPECT_NO_THROW(parse_hf_config(write("config.json", ok.dump())));
}

// A head pattern with fields of the wrong type escaped as nlohmann::type_error (no file named),
// and a float sink was cast to int64 (undefined behaviour when out of range).
TEST_F(ParserRegressions, HeadPatternFieldsOfTheWrongType) {
  const auto a = write("a.json", R"({"format":7,"layers":[]})");
  expect_input_error([&] { load_head_pattern(a); }, a, "malformed head pattern: [json.exception.type_error.302]");
  const auto b = write(
      "b.json",
      R"({"format":"kvscope.head_pattern.v1","layers":[{"heads":[{"streaming":true,"sink":1e300,"window":8}]}]})");
  expect_input_error([&] { load_head_pattern(b); }, b, "layer 0 head 0: 'sink' must be an integer");
}

// sink + window of a streaming head near 2^63 overflowed int64 (undefined behaviour) in
// kept_entries, which the budget accounting calls: spans beyond 2^40 tokens are refused.
TEST_F(ParserRegressions, HeadPatternSpansBeyondAnyContext) {
  const auto f = write(
      "p.json",
      R"({"format":"kvscope.head_pattern.v1","layers":[{"heads":[{"streaming":true,"sink":9223372036854775807,"window":1}]}]})");
  expect_input_error([&] { load_head_pattern(f); }, f,
                     "layer 0 head 0: 'sink' = 9223372036854775807 is beyond 2^40 tokens");
  const auto ok = write(
      "ok.json",
      R"({"format":"kvscope.head_pattern.v1","layers":[{"heads":[{"streaming":true,"sink":1099511627776,"window":1099511627776}]}]})");
  EXPECT_EQ(load_head_pattern(ok).kept_entries(int64_t(1) << 42), int64_t(1) << 41);
}

// A shard named by the index was opened wherever it pointed.
TEST_F(ParserRegressions, ShardIndexPointingOutsideTheCheckpoint) {
  const auto index = dir_ / "model.safetensors.index.json";
  for (const std::string shard : {"../secret.safetensors", "/etc/passwd", "a/../../b.safetensors", ""}) {
    write(index.filename(), R"({"weight_map":{"w":")" + shard + R"("}})");
    expect_input_error([&] { SafetensorsCheckpoint{dir_}; }, index, "is not a file name in the checkpoint folder");
  }
}

// Header dims up to 2^31 overflowed the int64 size computation (undefined behaviour), so a tiny
// file could pass the size check and be read far past its end. Now such shapes are refused, and
// the size check runs in 128-bit arithmetic.
TEST_F(ParserRegressions, Llama2cHeaderWhoseSizeOverflows) {
  const int32_t header[7] = {1 << 30, 1 << 30, 1 << 20, 1 << 10, 1 << 10, 1 << 30, 1 << 30};
  std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
  const auto f = write("model.bin", bytes + std::string(64, '\0'));
  expect_input_error([&] { load_model(f, LoadOptions{}); }, f, "the shapes imply more than 2^60 parameters");
  const int32_t big[7] = {1 << 14, 1 << 16, 1 << 10, 1 << 7, 1 << 7, 1 << 20, 1 << 20};  // about 2^42 floats
  const auto h = write("big.bin", std::string(reinterpret_cast<const char*>(big), sizeof big) + std::string(64, '\0'));
  expect_input_error([&] { load_model(h, LoadOptions{}); }, h,
                     "truncated llama2.c checkpoint: 92 bytes, the header implies 17661576675356");
  const int32_t negative_seq[7] = {8, 16, 1, 2, 1, 4, -100};
  const auto g = write("neg.bin", std::string(reinterpret_cast<const char*>(negative_seq), sizeof negative_seq) +
                                      std::string(4096, '\0'));
  expect_input_error([&] { load_model(g, LoadOptions{}); }, g, "seq_len must be > 0 (got -100)");
}

// encode() fell back to byte ids 3..258 that a short tok.bin does not have and indexed past it.
TEST_F(ParserRegressions, Llama2cTokenizerWithoutTheByteTokens) {
  std::string bytes(4, '\0');
  for (int i = 0; i < 10; ++i) {
    const float score = 0;
    const int32_t len = 1;
    bytes.append(reinterpret_cast<const char*>(&score), 4)
        .append(reinterpret_cast<const char*>(&len), 4)
        .push_back(char('a' + i));
  }
  const auto f = write("tok10.bin", bytes);
  expect_input_error([&] { load_tokenizer(f); }, f, "has 10 tokens; a llama2.c tokenizer needs at least 259");
}

TEST_F(ParserRegressions, PipelineIntegerBeyondInt64) {
  // fuzz_pipeline_spec: "window=6e43" reached a double-to-int64 cast (undefined behaviour).
  PolicyRegistry reg;
  register_builtin_policies(reg);
  for (const char* spec : {"snapkv:window=6e43", "snapkv:window=-1e300", "snapkv:window=inf", "snapkv:window=nan"}) {
    try {
      Pipeline p(reg, spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("window"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Pipeline(reg, "snapkv:window=3.5"), InputError);
  EXPECT_NO_THROW(Pipeline(reg, "snapkv:window=64"));
  // A float parameter of NaN passed the range check (NaN compares false both ways).
  for (const char* spec : {"snapkv+adakv:alpha=nan", "snapkv+adakv:alpha=-nan", "snapkv+adakv:alpha=inf"}) {
    try {
      Pipeline p(reg, spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("parameter 'alpha' = "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is outside [0, 1]"), std::string::npos) << e.what();
    }
  }
}

// Overlapping byte ranges were accepted: two tensors read the same bytes, so a damaged or crafted
// file loaded one tensor's weights as another's with no error. The reference implementation (the
// safetensors crate) requires the tensors back to back from byte 0 to the end of the file.
TEST_F(ParserRegressions, SafetensorsTensorsWhoseBytesOverlapAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       "tensors 'a' (bytes [0, 16)) and 'b' (bytes [0, 16)) overlap"},  // fully
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       "tensors 'a' (bytes [0, 16)) and 'b' (bytes [8, 16)) overlap"},  // partly, b inside a
      {R"({"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]},"b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})",
       "tensors 'a' (bytes [0, 9)) and 'b' (bytes [8, 16)) overlap"},  // by one byte
  };
  for (const auto& [header, problem] : cases) {
    const auto f = write_safetensors("model.safetensors", header, 16);
    expect_input_error([&] { SafetensorsFile{f}; }, f, problem);
  }
  // The same tensors back to back load.
  const auto ok = write_safetensors(
      "ok.safetensors",
      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})",
      16);
  EXPECT_EQ(SafetensorsFile(ok).entries().size(), 2u);
}

// A tensor beginning at an offset that is not a multiple of its element size was accepted and
// viewed through a misaligned pointer (undefined behaviour for F32 / BF16 data).
TEST_F(ParserRegressions, SafetensorsMisalignedTensorIsRefused) {
  const auto f = write_safetensors(
      "model.safetensors",
      R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})",
      11);
  expect_input_error([&] { SafetensorsFile{f}; }, f,
                     "tensor 'b' (bytes [3, 11)) begins at byte 3, not a multiple of its element size 4 (F32)");
}

// Bytes that belong to no tensor (a hole between two, or after the last) were accepted; the
// safetensors crate refuses both (InvalidOffset, MetadataIncompleteBuffer).
TEST_F(ParserRegressions, SafetensorsBytesBelongingToNoTensorAreRefused) {
  const auto hole = write_safetensors(
      "hole.safetensors",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      12);
  expect_input_error([&] { SafetensorsFile{hole}; }, hole,
                     "bytes [4, 8) of the data section belong to no tensor (the next is 'b', bytes [8, 12))");
  const auto first =
      write_safetensors("first.safetensors", R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  expect_input_error([&] { SafetensorsFile{first}; }, first, "bytes [0, 4) of the data section belong to no tensor");
  const auto trailing =
      write_safetensors("trailing.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12);
  expect_input_error([&] { SafetensorsFile{trailing}; }, trailing,
                     "the tensors end at byte 4 of the 12-byte data section: the last 8 bytes belong to no tensor");
}

// A header length that is not a multiple of 8 (files written before the header was padded) leaves
// the data section itself misaligned in the mapping: such tensors are copied, not viewed.
TEST_F(ParserRegressions, SafetensorsWithAnUnpaddedHeaderReadsTheRightValues) {
  std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  while (header.size() % 8 != 1) header += ' ';
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  const auto f = write("model.safetensors", bytes + header + std::string(reinterpret_cast<const char*>(values), 12));
  const at::Tensor t = SafetensorsFile(f).tensor("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 4, 0u);
  ASSERT_EQ(t.numel(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t[i].item<float>(), values[i]);
}

// num_hidden_layers below the checkpoint's layers ran a truncated model silently (the extra
// layers' weights unused); above it, the load failed naming only the first missing tensor.
TEST_F(ParserRegressions, LayerCountThatDoesNotMatchTheWeightsIsRefused) {
  fs::create_symlink(test::pycode_dir() / "model.safetensors", dir_ / "model.safetensors");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::create_symlink(test::pycode_dir() / f, dir_ / f);
  auto j = test::read_json(test::pycode_dir() / "config.json");
  ASSERT_EQ(j["num_hidden_layers"], 8);
  const std::string weights = (dir_ / "model.safetensors").string();
  j["num_hidden_layers"] = 10;
  auto config = write("config.json", j.dump());
  expect_input_error(
      [&] { load_model(dir_, LoadOptions{}); }, config,
      "num_hidden_layers is 10 but " + weights + " holds weights for 8 layers (0-7): no weights for layers 8-9");
  j["num_hidden_layers"] = 6;
  config = write("config.json", j.dump());
  expect_input_error(
      [&] { load_model(dir_, LoadOptions{}); }, config,
      "num_hidden_layers is 6 but " + weights + " holds weights for 8 layers (0-7): layers 6-7 would be unused");
  j["num_hidden_layers"] = 8;
  write("config.json", j.dump());
  EXPECT_EQ(load_model(dir_, LoadOptions{}).weights.layers.size(), 8u);
}

// A llama2.c header whose n_layers is below the weights' (or a file with bytes appended) loaded the
// first layers and silently ignored the rest; now the file must be exactly the size the header implies.
TEST_F(ParserRegressions, Llama2cHeaderThatDoesNotMatchItsWeightsIsRefused) {
  const std::string original = test::read_text(test::stories_dir() / "stories260K.bin");
  ASSERT_EQ(original.size(), 1056540u);
  std::string fewer = original;
  const int32_t four = 4;
  std::memcpy(fewer.data() + 8, &four, 4);  // n_layers 5 -> 4
  const auto f = write("fewer.bin", fewer);
  expect_input_error([&] { load_model(f, LoadOptions{}); }, f,
                     "llama2.c checkpoint of 1056540 bytes, 181760 more than its header implies (dim 64, hidden_dim "
                     "172, n_layers 4, n_heads 8, n_kv_heads 4, vocab_size 512, seq_len 512 -> 874780 bytes): the "
                     "header does not match its weights");
  const auto g = write("appended.bin", original + std::string(8, '\0'));
  expect_input_error([&] { load_model(g, LoadOptions{}); }, g, "1056548 bytes, 8 more than its header implies");
}

}  // namespace
}  // namespace kvscope
