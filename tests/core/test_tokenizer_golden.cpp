// The real tokenizers of ../shared/tokenizers (Llama 3.1, Qwen3, Gemma 3, Llama 2, DeepSeek-V3;
// tools/fetch-tokenizers.sh puts them in .cache/tokenizers, or KVSCOPE_TOKENIZER_CACHE) against the
// ids Hugging Face gives in golden.json: every `encode` entry with and without special tokens, the
// ids of every rendered chat text, decoding, and the speed of a 100 KB encode. Then what
// tokenizer_config.json changes (transformers' LlamaTokenizer, add_bos_token) on small fixtures, and
// the one-line errors of bad tokenizer.json / tokenizer_config.json files.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "test_support.h"

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Ids = std::vector<int32_t>;
using nlohmann::json;

// Sanitizer and unoptimised builds run the same tests, slower.
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
constexpr double kSlowBuildFactor = 8.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kSlowBuildFactor = 8.0;
#else
constexpr double kSlowBuildFactor = 1.0;
#endif
#else
constexpr double kSlowBuildFactor = 1.0;
#endif

fs::path tokenizer_cache() {
  if (const char* env = std::getenv("KVSCOPE_TOKENIZER_CACHE"); env != nullptr && *env != '\0') return env;
  return test::source_dir() / ".cache/tokenizers";
}

/// ../shared/tokenizers/golden.json beside the source tree.
fs::path golden_file() { return test::source_dir().parent_path() / "shared/tokenizers/golden.json"; }

/// The package's models directory (tokenizer.json + tokenizer_config.json) of tokenizer `key`.
fs::path tokenizer_dir(const std::string& key) { return tokenizer_cache() / key / "package/models"; }

const std::vector<std::string>& tokenizer_keys() {
  static const std::vector<std::string> keys = {"llama3_1", "qwen3", "gemma3", "llama2", "deepseek_v3"};
  return keys;
}

/// About 100 KB of varied text: the core sources, then the golden texts, repeated to length.
std::string hundred_kilobytes(const json& golden) {
  std::string text;
  for (const char* name : {"tokenizer_hf.cpp", "engine.cpp", "generate.cpp", "model_hf.cpp"}) {
    const fs::path file = test::source_dir() / "core/src" / name;
    if (fs::is_regular_file(file)) text += test::read_text(file);
  }
  for (const json& entry : golden.at("encode")) text += entry.at("text").get<std::string>() + "\n";
  while (text.size() < 100'000) text += text;
  text.resize(100'000);
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();  // no cut character
  return text;
}

/// One test per tokenizer (each loads it once: Gemma 3's tokenizer.json is 33 MB).
class GoldenTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizer, MatchesHuggingFace) {
  const fs::path dir = tokenizer_dir(GetParam());
  if (!fs::is_regular_file(dir / "tokenizer.json"))
    GTEST_SKIP() << "no " << (dir / "tokenizer.json").string()
                 << ": run tools/fetch-tokenizers.sh (or set KVSCOPE_TOKENIZER_CACHE)";
  if (!fs::is_regular_file(golden_file())) GTEST_SKIP() << "no " << golden_file().string();
  const json golden = test::read_json(golden_file()).at(GetParam());
  const auto tokenizer = load_tokenizer(dir);
  ASSERT_FALSE(golden.at("encode").empty());

  // Every `encode` entry, without and with the post-processor's special tokens.
  for (const json& entry : golden.at("encode")) {
    const std::string text = entry.at("text").get<std::string>();
    SCOPED_TRACE("encode: " + text);
    const Ids ids = tokenizer->encode(text);
    EXPECT_EQ(ids, entry.at("ids").get<Ids>());
    EXPECT_EQ(tokenizer->encode_with_special(text), entry.at("ids_with_special").get<Ids>());
    // Decoding: byte-level and byte-fallback tokenizers are lossless, except that Llama 2's decoder
    // strips the first space (as Hugging Face's does) and DeepSeek-V3, as transformers loads it
    // (LlamaTokenizerFast), drops every character its Metaspace pipeline has no token for.
    if (GetParam() != "deepseek_v3") {
      const std::string expected = GetParam() == "llama2" && text.starts_with(' ') ? text.substr(1) : text;
      EXPECT_EQ(tokenizer->decode(ids), expected);
    }
  }

  if (GetParam() == "qwen3") {  // its NFC normalizer: a decomposed é is the composed one
    const std::string decomposed = "cafe\xCC\x81";
    EXPECT_EQ(tokenizer->encode(decomposed), tokenizer->encode("caf\xC3\xA9"));
  }

  // apply_chat_template tokenizes the rendered text without adding special tokens: the template's
  // own <|begin_of_text|>, <|im_start|>, <start_of_turn>... must come out as their added tokens.
  for (const json& entry : golden.value("chat", json::array())) {
    if (!entry.contains("text")) continue;
    const std::string text = entry.at("text").get<std::string>();
    SCOPED_TRACE("chat: " + text);
    EXPECT_EQ(tokenizer->encode(text), entry.at("ids").get<Ids>());
  }

  // 32K-token prompts: 100 KB encodes well under a second (a few tens of ms in Release).
  const std::string text = hundred_kilobytes(golden);
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = tokenizer->encode(text);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("encode_100kb_ms", std::to_string(ms));
  std::printf("[ %s ] 100 KB -> %zu tokens in %.1f ms\n", GetParam().c_str(), ids.size(), ms);
  EXPECT_GT(ids.size(), 10'000u);
  EXPECT_LT(ms, 500.0 * kSlowBuildFactor);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, GoldenTokenizer, ::testing::ValuesIn(tokenizer_keys()),
                         [](const auto& info) { return info.param; });

// ------------------------------------------------------------------------------------------------
// tokenizer_config.json as transformers reads it (small fixtures: no cache needed)
// ------------------------------------------------------------------------------------------------

// Llama-2 style as Hugging Face's converter writes it: Prepend + Replace normalizer, no
// pre-tokenizer, BOS through TemplateProcessing.
json llama2_style() {
  return json::parse(R"json({
    "added_tokens": [
      {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
    ],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    ]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    ]},
    "model": {
      "type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "H": 4, "i": 5, "▁H": 6, "▁Hi": 7},
      "merges": ["▁ H", "▁H i"]
    }
  })json");
}

TEST(TokenizerConfig, LlamaTokenizerClassUsesMetaspaceAsTransformersDoes) {
  TempDir dir;
  const fs::path file = dir.write("tokenizer.json", llama2_style().dump());
  // tokenizer.json alone (the `tokenizers` library): Prepend gives "▁▁Hi" -> ▁ + ▁Hi.
  EXPECT_EQ(load_hf_tokenizer(file)->encode(" Hi"), (Ids{3, 7}));
  // transformers' LlamaTokenizer: Metaspace prepends no '▁' to a text that starts with one.
  dir.write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "legacy": true})");
  const auto llama = load_tokenizer(dir.path());
  EXPECT_EQ(llama->encode(" Hi"), (Ids{7}));
  EXPECT_EQ(llama->encode("Hi"), (Ids{7}));
  EXPECT_EQ(llama->encode("Hi<s>Hi"), (Ids{7, 1, 7}));  // legacy: '▁' before every piece
  EXPECT_EQ(llama->encode_with_special("Hi"), (Ids{1, 7}));
  EXPECT_EQ(llama->decode(Ids{7}), "Hi");
  EXPECT_EQ(load_tokenizer(file)->encode(" Hi"), (Ids{7}));  // the file path finds the config beside it
  // Not legacy (transformers' default): '▁' only at the start of the input.
  dir.write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizerFast"})");
  EXPECT_EQ(load_tokenizer(dir.path())->encode("Hi<s>Hi"), (Ids{7, 1, 4, 5}));
  // add_prefix_space false: no '▁' at all.
  dir.write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "add_prefix_space": false})");
  EXPECT_EQ(load_tokenizer(dir.path())->encode("Hi"), (Ids{4, 5}));
  // Another class keeps tokenizer.json as it is.
  dir.write("tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
  EXPECT_EQ(load_tokenizer(dir.path())->encode(" Hi"), (Ids{3, 7}));
}

TEST(TokenizerConfig, AddBosTokenWhenTokenizerJsonHasNoPostProcessor) {
  TempDir dir;
  json spec = llama2_style();
  spec["post_processor"] = nullptr;
  dir.write("tokenizer.json", spec.dump());
  EXPECT_EQ(load_tokenizer(dir.path())->encode_with_special("Hi"), (Ids{7}));  // no config: nothing added
  dir.write("tokenizer_config.json",
            R"({"add_bos_token": true, "add_eos_token": true, "bos_token": {"content": "<s>"}, "eos_token": "</s>"})");
  EXPECT_EQ(load_tokenizer(dir.path())->encode_with_special("Hi"), (Ids{1, 7, 2}));
  // tokenizer.json's post-processor wins over the config (as DeepSeek-V3's shows: add_bos_token
  // true, ByteLevel post-processor, no BOS).
  spec["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  dir.write("tokenizer.json", spec.dump());
  EXPECT_EQ(load_tokenizer(dir.path())->encode_with_special("Hi"), (Ids{7}));
}

TEST(TokenizerConfig, PostProcessorSequenceRobertaAndBert) {
  TempDir dir;
  json spec = llama2_style();
  spec["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "</s>", "type_id": 0}}],
       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                          "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}]})");
  EXPECT_EQ(load_hf_tokenizer(dir.write("sequence.json", spec.dump()))->encode_with_special("Hi"), (Ids{1, 7, 2}));
  spec["post_processor"] = json::parse(R"({"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]})");
  EXPECT_EQ(load_hf_tokenizer(dir.write("roberta.json", spec.dump()))->encode_with_special("Hi"), (Ids{1, 7, 2}));
  EXPECT_EQ(load_hf_tokenizer(dir.write("roberta.json", spec.dump()))->encode("Hi"), (Ids{7}));
}

// `tokenizers` drops a single_word match inside a word together with the text it matched (no
// shorter token is tried there); lstrip/rstrip take the spaces around a token into it.
TEST(TokenizerConfig, AddedTokensSingleWordAndStrip) {
  TempDir dir;
  json spec = llama2_style();
  spec["added_tokens"].push_back(json::parse(
      R"({"id": 20, "content": "ab", "single_word": true, "lstrip": false, "rstrip": false, "normalized": false,
          "special": false})"));
  spec["added_tokens"].push_back(json::parse(
      R"({"id": 21, "content": "a", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
          "special": false})"));
  spec["added_tokens"].push_back(json::parse(
      R"({"id": 22, "content": "<m>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false,
          "special": true})"));
  const auto tokenizer = load_hf_tokenizer(dir.write("tokenizer.json", spec.dump()));
  EXPECT_EQ(tokenizer->encode("ab ab"), (Ids{20, 3, 3, 20}));    // " " -> Prepend + Replace -> "▁▁"
  EXPECT_EQ(tokenizer->encode("xab"), (Ids{3, 0}));              // "ab" dropped, and "a" not tried: ▁ + unk(xab)
  EXPECT_EQ(tokenizer->encode("xa"), (Ids{3, 0, 21}));           // "a" has no word rule
  EXPECT_EQ(tokenizer->encode("Hi  <m>  Hi"), (Ids{7, 22, 7}));  // the spaces around <m> are its own
}

// Qwen2/Qwen3's NFC normalizer: decomposed text tokenizes as its composed form (expected strings
// from Python's unicodedata.normalize("NFC", ...)).
TEST(HfNormalizer, NfcComposesAsUnicodeDataDoes) {
  const json spec = json::parse(R"json({
    "normalizer": {"type": "NFC"}, "pre_tokenizer": null, "decoder": {"type": "Fuse"},
    "model": {"type": "BPE", "vocab": {"e": 0, "\u0301": 1, "\u00e9": 2, "\u0229": 3, "\u0327": 4,
                                      "\u1100": 5, "\u1161": 6, "\uac00": 7, "\u11a8": 8, "\uac01": 9,
                                      "\u212b": 10, "\u00c5": 11, "\u0323": 12, "\u1e0d": 13, "\u0307": 14,
                                      "d": 15, "\u1e0b": 16},
              "merges": []}
  })json");
  TempDir dir;
  const auto tokenizer = load_hf_tokenizer(dir.write("tokenizer.json", spec.dump()));
  EXPECT_EQ(tokenizer->encode("e\xCC\x81"), Ids{2});                 // e + U+0301 -> é
  EXPECT_EQ(tokenizer->encode("\xC3\xA9\xCC\xA7"), (Ids{3, 1}));     // é + cedilla -> ȩ + U+0301 (reordered)
  EXPECT_EQ(tokenizer->encode("\xE1\x84\x80\xE1\x85\xA1"), Ids{7});  // Hangul L + V -> 가
  EXPECT_EQ(tokenizer->encode("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), Ids{9});  // L + V + T -> 각
  EXPECT_EQ(tokenizer->encode("\xE2\x84\xAB"), Ids{11});                         // Angstrom sign -> Å
  EXPECT_EQ(tokenizer->encode("d\xCC\x87\xCC\xA3"), (Ids{13, 14}));  // d + dot above + dot below -> ḍ + U+0307
  EXPECT_EQ(tokenizer->encode("e"), Ids{0});
}

// ------------------------------------------------------------------------------------------------
// Bad tokenizer.json / tokenizer_config.json: one line naming the file and the problem
// ------------------------------------------------------------------------------------------------

/// `load` throws InputError whose message is one line naming `file` and containing `problem`.
void expect_one_line_error(const std::function<void()>& load, const fs::path& file, const std::string& problem) {
  try {
    load();
    ADD_FAILURE() << "no InputError for " << file;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << message;
  }
}

TEST(TokenizerConfig, UnsupportedTypesFailInOneLineNamingTheFile) {
  struct Case {
    std::function<void(json&)> edit;
    std::string problem;
    bool also_as_llama_class;  // LlamaTokenizer replaces normalizer, pre-tokenizer and decoder
  };
  const std::vector<Case> cases = {
      {[](json& t) { t["model"]["type"] = "WordPiece"; }, "unsupported model type 'WordPiece' (supported: BPE)", true},
      {[](json& t) { t["model"]["type"] = "Unigram"; }, "unsupported model type 'Unigram'", true},
      {[](json& t) {
         t["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
       },
       "unsupported pre-tokenizer 'BertPreTokenizer'", false},
      {[](json& t) {
         t["normalizer"] = {{"type", "NFKC"}};
       },
       "unsupported normalizer 'NFKC'", false},
      {[](json& t) {
         t["decoder"] = {{"type", "WordPiece"}};
       },
       "unsupported decoder 'WordPiece'", false},
      {[](json& t) {
         t["post_processor"] = {{"type", "Foo"}};
       },
       "unsupported post-processor 'Foo'", true},
      {[](json& t) { t["post_processor"]["special_tokens"] = json::object(); },
       "uses the special token '<s>', which its \"special_tokens\" does not define", true},
      {[](json& t) { t["post_processor"]["special_tokens"]["<s>"]["ids"] = {99}; },
       "post_processor adds token id 99, which is neither in model.vocab nor an added token", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.problem);
    TempDir dir;
    json spec = llama2_style();
    c.edit(spec);
    const fs::path file = dir.write("tokenizer.json", spec.dump());
    expect_one_line_error([&] { load_hf_tokenizer(file); }, file, c.problem);
    expect_one_line_error([&] { load_tokenizer(dir.path()); }, file, c.problem);
    dir.write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizerFast"})");
    if (c.also_as_llama_class) {
      expect_one_line_error([&] { load_tokenizer(dir.path()); }, file, c.problem);
    } else {
      EXPECT_EQ(load_tokenizer(dir.path())->encode("Hi"), (Ids{7}));
    }
  }
}

TEST(TokenizerConfig, BadConfigFailsInOneLineNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{ \"tokenizer_class\": ", "not valid JSON"},
      {"[1, 2]", "tokenizer_config.json is not a JSON object"},
      {R"({"tokenizer_class": 3})", "tokenizer_class must be a string"},
      {R"({"tokenizer_class": "LlamaTokenizer", "legacy": "yes"})", "legacy must be true or false"},
      {R"({"add_bos_token": true})", "add_bos_token is true but there is no bos_token"},
      {R"({"add_bos_token": true, "bos_token": "<bos>"})",
       "add_bos_token is true but bos_token '<bos>' is not a token of tokenizer.json"},
      {R"({"add_eos_token": true, "eos_token": 7})", "eos_token must be a string or an object"},
  };
  for (const auto& [config, problem] : cases) {
    SCOPED_TRACE(config);
    TempDir dir;
    json spec = llama2_style();
    spec["post_processor"] = nullptr;
    dir.write("tokenizer.json", spec.dump());
    const fs::path file = dir.write("tokenizer_config.json", config);
    expect_one_line_error([&] { load_tokenizer(dir.path()); }, file, problem);
  }
}

}  // namespace
}  // namespace kvscope
