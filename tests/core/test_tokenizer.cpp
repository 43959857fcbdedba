// Tokenizers: pycode-16m tokenizer.json against the Hugging Face golden ids, llama2.c tok512.bin
// against SentencePiece tok512.model, hand-written tokenizer.json fixtures for the pipeline
// pieces real checkpoints use, and the errors for bad inputs.
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "test_support.h"

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

#ifndef KVSCOPE_SOURCE_DIR
#error "KVSCOPE_SOURCE_DIR (absolute path of the source tree, as a string literal) must be defined"
#endif

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Ids = std::vector<int32_t>;

fs::path source_dir() { return fs::path(KVSCOPE_SOURCE_DIR); }
fs::path pycode_dir() { return source_dir() / "assets/models/pycode-16m"; }
fs::path stories_dir() { return source_dir() / "assets/models/stories260K"; }

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// Asserts that `load` throws InputError whose message names `file` (its file name).
void expect_input_error(const std::function<void()>& load, const fs::path& file, const std::string& also = "") {
  try {
    load();
    ADD_FAILURE() << "no InputError for " << file;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(file.filename().string()), std::string::npos) << message;
    EXPECT_NE(message.find(also), std::string::npos) << message;
  }
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t pos = text.find(from);
  if (pos == std::string::npos) throw std::runtime_error("fixture has no '" + from + "'");
  return text.replace(pos, from.size(), to);
}

// ------------------------------------------------------------------------------------------------
// pycode-16m (byte-level BPE, Sequence[Digits(individual), ByteLevel]) vs the golden ids
// ------------------------------------------------------------------------------------------------

TEST(HfTokenizer, PycodeMatchesGoldenInputIds) {
  const auto tokenizer = load_hf_tokenizer(pycode_dir() / "tokenizer.json");
  EXPECT_EQ(tokenizer->vocab_size(), 8192);
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(pycode_dir() / "golden")) {
    if (entry.path().extension() != ".json") continue;
    const auto golden = nlohmann::json::parse(read_file(entry.path()));
    if (!golden.is_object() || !golden.contains("prompt_file")) continue;
    SCOPED_TRACE(entry.path().filename().string());
    const std::string prompt = read_file(pycode_dir() / "golden/prompts" / golden.at("prompt_file").get<std::string>());
    const Ids golden_ids = golden.at("input_ids").get<Ids>();
    ASSERT_GE(golden_ids.size(), 1u);
    ASSERT_EQ(golden_ids.front(), 0);  // the references prepend <|endoftext|> themselves
    const Ids ids = tokenizer->encode(prompt);
    EXPECT_EQ(ids, Ids(golden_ids.begin() + 1, golden_ids.end()));
    EXPECT_EQ(tokenizer->decode(ids), prompt);
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

TEST(HfTokenizer, PycodeSpecialTokensAndRoundTrips) {
  const auto tokenizer = load_tokenizer(pycode_dir());
  const Ids ids = tokenizer->encode("<|im_start|>x = 42<|im_end|><|endoftext|>");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids[ids.size() - 2], 2);
  EXPECT_EQ(ids.back(), 0);
  EXPECT_EQ(tokenizer->decode(Ids{0}), "<|endoftext|>");
  EXPECT_EQ(tokenizer->token_text(0), "<|endoftext|>");
  for (const std::string text : {"", " ", "\n\n\t  x", "def f(a, b=12345):\n    return a ** b  # ok\n",
                                 "unicode: caf\xC3\xA9, \xE6\x97\xA5\xE6\x9C\xAC, \xF0\x9F\x98\x80 !",
                                 "trailing spaces   ", "'s 've 'LL CAPS"}) {
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text) << text;
  }
}

TEST(HfTokenizer, PycodeEncodesFiftyThousandCharactersQuickly) {
  const auto tokenizer = load_hf_tokenizer(pycode_dir() / "tokenizer.json");
  const std::string text = read_file(pycode_dir() / "golden/prompts/filler.py");
  ASSERT_GE(text.size(), 50000u);
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = tokenizer->encode(text);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("encode_ms", std::to_string(ms));
  EXPECT_LT(ms, 2000.0);  // ~10 ms in an optimized build; generous for debug/sanitizer builds
  EXPECT_EQ(tokenizer->decode(ids), text);
}

TEST(HfTokenizer, PartialByteTokensDecodeToRawBytes) {
  const auto tokenizer = load_hf_tokenizer(pycode_dir() / "tokenizer.json");
  const Ids ids = tokenizer->encode("\xE6\x97\xA5");  // a CJK character: several byte tokens
  ASSERT_GE(ids.size(), 2u);
  std::string joined;
  for (int32_t id : ids) joined += tokenizer->decode(Ids{id});
  EXPECT_EQ(joined, "\xE6\x97\xA5");
}

// ------------------------------------------------------------------------------------------------
// llama2.c tok512.bin vs SentencePiece tok512.model (stories260K)
// ------------------------------------------------------------------------------------------------

const std::vector<std::string>& story_sentences() {
  static const std::vector<std::string> sentences = {
      "Once upon a time, there was a little girl named Lily.",
      "She loved to play outside in the park.",
      "The quick brown fox jumps over the lazy dog!",
      "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC",  // byte fallback
      "Hello\nworld",
      "a",
      "",
  };
  return sentences;
}

TEST(Llama2cTokenizer, EncodesKnownIds) {
  const auto tokenizer = load_llama2c_tokenizer(stories_dir() / "tok512.bin", 512);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->encode("Once upon a time"), (Ids{403, 407, 261, 378}));
  EXPECT_EQ(tokenizer->encode(""), Ids{});
  // 日 is not a piece: dummy-prefix " " (410), then byte fallback with id = byte + 3.
  EXPECT_EQ(tokenizer->encode("\xE6\x97\xA5"), (Ids{410, 0xE6 + 3, 0x97 + 3, 0xA5 + 3}));
  EXPECT_EQ(tokenizer->token_text(410), " ");
}

TEST(Llama2cTokenizer, DecodesLikeRunC) {
  const auto tokenizer = load_llama2c_tokenizer(stories_dir() / "tok512.bin", 512);
  EXPECT_EQ(tokenizer->decode(Ids{1, 403, 407, 261, 378}), "\n<s>\nOnce upon a time");  // space after BOS stripped
  EXPECT_EQ(tokenizer->decode(Ids{403, 407, 261, 378}), " Once upon a time");
  EXPECT_EQ(tokenizer->decode(Ids{'A' + 3}), "A");      // <0x41>
  EXPECT_EQ(tokenizer->decode(Ids{0xC3 + 3}), "\xC3");  // partial UTF-8 stays a raw byte
  EXPECT_EQ(tokenizer->decode(Ids{0xC3 + 3, 0xA9 + 3}), "\xC3\xA9");
  EXPECT_EQ(tokenizer->token_text(403), " Once");
  EXPECT_EQ(tokenizer->token_text(3 + 'A'), "<0x41>");
}

TEST(Llama2cTokenizer, RoundTripsAfterBos) {
  const auto tokenizer = load_llama2c_tokenizer(stories_dir() / "tok512.bin", 512);
  for (const std::string& sentence : story_sentences()) {
    Ids ids{1};
    const Ids encoded = tokenizer->encode(sentence);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    EXPECT_EQ(tokenizer->decode(ids), "\n<s>\n" + sentence) << sentence;  // BOS's piece is "\n<s>\n"
  }
}

TEST(Llama2cTokenizer, AgreesWithSentencePiece) {
#ifndef KVSCOPE_HAVE_SENTENCEPIECE
  GTEST_SKIP() << "built without SentencePiece";
#else
  const auto llama2c = load_llama2c_tokenizer(stories_dir() / "tok512.bin", 512);
  const auto sentencepiece = load_sentencepiece_tokenizer(stories_dir() / "tok512.model");
  EXPECT_EQ(sentencepiece->vocab_size(), 512);
  for (const std::string& sentence : story_sentences()) {
    SCOPED_TRACE(sentence);
    const Ids ids = sentencepiece->encode(sentence);
    EXPECT_EQ(llama2c->encode(sentence), ids);
    EXPECT_EQ(sentencepiece->decode(ids), sentence);
  }
  EXPECT_EQ(sentencepiece->decode(Ids{0xC3 + 3}), "\xC3");  // raw byte, not U+FFFD
  EXPECT_EQ(sentencepiece->token_text(403), " Once");
#endif
}

TEST(Llama2cTokenizer, DirectoryDispatchInfersVocabSize) {
  TempDir dir;
  fs::copy_file(stories_dir() / "tok512.bin", dir.path() / "tok512.bin");
  const auto tokenizer = load_tokenizer(dir.path());
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->encode("Once upon a time"), (Ids{403, 407, 261, 378}));
  EXPECT_EQ(load_tokenizer(stories_dir() / "tok512.bin")->vocab_size(), 512);
}

// ------------------------------------------------------------------------------------------------
// Hand-written tokenizer.json fixtures
// ------------------------------------------------------------------------------------------------

// Llama-3 style: Split with the Llama-3 regex, ByteLevel without regex, ignore_merges, merges as
// pairs, special and non-special added tokens. 'Ġ' is the byte-level ' ', 'Ċ' is '\n'.
constexpr std::string_view kLlama3Style = R"json({
  "version": "1.0",
  "added_tokens": [
    {"id": 100, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 101, "content": "<|eot_id|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 102, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false},
    {"id": 103, "content": "<x>>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
  ]},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {
    "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
    "vocab": {"I": 0, "T": 1, "'": 2, "S": 3, "O": 4, "K": 5, "Ġ": 6, "1": 7, "2": 8, "3": 9,
              "4": 10, "5": 11, "h": 12, "e": 13, "l": 14, "o": 15, "Ċ": 16, "b": 17,
              "IT": 18, "'S": 19, "OK": 20, "123": 21, "45": 22, "Ġhello": 23, "ĊĊ": 24, "Ġb": 25,
              "he": 26, "ll": 27, "hello": 28, "'SOK": 29, "<": 30, ">": 31, "x": 32},
    "merges": [["h", "e"], ["l", "l"]]
  }
})json";

TEST(HfFixture, Llama3RegexSplitsLikeTheReference) {
  TempDir dir;
  const auto tokenizer = load_hf_tokenizer(dir.write("tokenizer.json", kLlama3Style));
  // Pieces: IT | 'S (case-insensitive contraction) | OK | ' ' | 123 | 45 | ' hello' | \n\n | ' ' | ' b'
  const std::string text = "IT'SOK 12345 hello\n\n  b";
  EXPECT_EQ(tokenizer->encode(text), (Ids{18, 19, 20, 6, 21, 22, 23, 24, 6, 25}));
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  EXPECT_EQ(tokenizer->token_text(23), " hello");
  EXPECT_EQ(tokenizer->vocab_size(), 104);
}

TEST(HfFixture, IgnoreMergesEmitsWholeVocabularyWords) {
  TempDir dir;
  const auto with_ignore = load_hf_tokenizer(dir.write("ignore.json", kLlama3Style));
  EXPECT_EQ(with_ignore->encode("hello"), Ids{28});
  const auto without = load_hf_tokenizer(dir.write(
      "merge.json", replaced(std::string(kLlama3Style), R"("ignore_merges": true)", R"("ignore_merges": false)")));
  EXPECT_EQ(without->encode("hello"), (Ids{26, 27, 15}));  // he + ll + o via the merges
}

TEST(HfFixture, AddedTokensInTheMiddleOfTextLongestMatch) {
  TempDir dir;
  const auto tokenizer = load_hf_tokenizer(dir.write("tokenizer.json", kLlama3Style));
  const std::string text = "<|begin_of_text|>hello<|eot_id|>hello<x>>b<x>";
  EXPECT_EQ(tokenizer->encode(text), (Ids{100, 28, 101, 28, 103, 17, 102}));
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  EXPECT_EQ(tokenizer->encode("<x"), (Ids{30, 32}));  // a prefix of an added token is plain text
}

// Digits(individual_digits=false) then ByteLevel(use_regex=false); merges as "a b" strings.
constexpr std::string_view kDigitsStyle = R"json({
  "added_tokens": [],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
  ]},
  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "model": {
    "type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
    "vocab": {"a": 0, "b": 1, "1": 2, "2": 3, "3": 4, "4": 5, "b1": 6, "12": 7, "34": 8, "1234": 9, "ab": 10},
    "merges": ["b 1", "1 2", "3 4", "12 34", "a b"]
  }
})json";

TEST(HfFixture, DigitsContiguousAndIndividual) {
  TempDir dir;
  const auto contiguous = load_hf_tokenizer(dir.write("contiguous.json", kDigitsStyle));
  EXPECT_EQ(contiguous->encode("ab1234ab"), (Ids{10, 9, 10}));  // "b1" never merges across the split
  EXPECT_EQ(contiguous->decode(Ids{10, 9, 10}), "ab1234ab");
  const auto individual = load_hf_tokenizer(
      dir.write("individual.json",
                replaced(std::string(kDigitsStyle), R"("individual_digits": false)", R"("individual_digits": true)")));
  EXPECT_EQ(individual->encode("ab1234ab"), (Ids{10, 2, 3, 4, 5, 10}));
  const auto no_digits = load_hf_tokenizer(dir.write(
      "none.json", replaced(std::string(kDigitsStyle), R"({"type": "Digits", "individual_digits": false},)", "")));
  EXPECT_EQ(no_digits->encode("ab1234ab"), (Ids{0, 6, 3, 8, 10}));  // b1 merges first (rank 0)
}

TEST(HfFixture, MergesAsStringsAndAsPairsAgree) {
  TempDir dir;
  const auto strings = load_hf_tokenizer(dir.write("strings.json", kDigitsStyle));
  const auto pairs = load_hf_tokenizer(
      dir.write("pairs.json", replaced(std::string(kDigitsStyle), R"(["b 1", "1 2", "3 4", "12 34", "a b"])",
                                       R"([["b", "1"], ["1", "2"], ["3", "4"], ["12", "34"], ["a", "b"]])")));
  for (const std::string text : {"ab1234ab", "b1b1", "1234123", "aabb"}) {
    EXPECT_EQ(strings->encode(text), pairs->encode(text)) << text;
  }
}

// Split with a literal pattern: every behaviour, and invert.
std::string split_fixture(const std::string& behavior, bool invert) {
  return R"json({
    "added_tokens": [], "normalizer": null, "decoder": null,
    "pre_tokenizer": {"type": "Split", "pattern": {"String": "-"}, "behavior": ")json" +
         behavior + R"(", "invert": )" + (invert ? "true" : "false") + R"json(},
    "model": {"type": "BPE", "ignore_merges": true,
              "vocab": {"x": 0, "y": 1, "-": 2, "x-": 3, "-y": 4, "--": 5}, "merges": []}
  })json";
}

TEST(HfFixture, SplitBehaviors) {
  TempDir dir;
  const auto encode = [&](const std::string& behavior, bool invert, const std::string& text) {
    return load_hf_tokenizer(dir.write(behavior + ".json", split_fixture(behavior, invert)))->encode(text);
  };
  EXPECT_EQ(encode("Isolated", false, "x-y"), (Ids{0, 2, 1}));
  EXPECT_EQ(encode("Isolated", false, "x--y"), (Ids{0, 2, 2, 1}));
  EXPECT_EQ(encode("Removed", false, "x-y"), (Ids{0, 1}));
  EXPECT_EQ(encode("MergedWithPrevious", false, "x-y"), (Ids{3, 1}));
  EXPECT_EQ(encode("MergedWithNext", false, "x-y"), (Ids{0, 4}));
  EXPECT_EQ(encode("Contiguous", false, "x--y"), (Ids{0, 5, 1}));
  EXPECT_EQ(encode("Removed", true, "x-y"), (Ids{2}));
}

// Llama-2 / Mistral style: Prepend("▁") + Replace(" ", "▁") normalizer, byte_fallback, fuse_unk.
constexpr std::string_view kLlama2Style = R"json({
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
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}
  ]},
  "model": {
    "type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xE4>": 3, "<0xB8>": 4, "<0x96>": 5,
              "▁": 6, "H": 7, "i": 8, "▁H": 9, "▁Hi": 10, "!": 11},
    "merges": ["▁ H", "▁H i"]
  }
})json";

TEST(HfFixture, Llama2StyleByteFallbackAndUnknowns) {
  TempDir dir;
  const auto tokenizer = load_hf_tokenizer(dir.write("tokenizer.json", kLlama2Style));
  const std::string text = "Hi \xE4\xB8\x96!";  // 世 is not in the vocabulary: <0xE4><0xB8><0x96>
  EXPECT_EQ(tokenizer->encode(text), (Ids{10, 6, 3, 4, 5, 11}));
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  EXPECT_EQ(tokenizer->encode("HiZZ"), (Ids{10, 0}));  // consecutive unknowns fused
  EXPECT_EQ(tokenizer->encode("<s>Hi"), (Ids{1, 10}));
  EXPECT_EQ(tokenizer->decode(Ids{3}), "\xE4");  // partial UTF-8 kept as a raw byte
  EXPECT_EQ(tokenizer->token_text(10), " Hi");
}

TEST(HfFixture, MetaspacePreTokenizerPrependsOnlyAtTheStart) {
  std::string json = replaced(
      std::string(kLlama2Style), R"("pre_tokenizer": null)",
      R"("pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})");
  const size_t begin = json.find(R"("normalizer": {)");
  const size_t end = json.find(R"("pre_tokenizer")");
  json.replace(begin, end - begin, "\"normalizer\": null,\n  ");
  json = replaced(json, R"({"type": "Replace", "pattern": {"String": "▁"}, "content": " "},)",
                  R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},)");
  TempDir dir;
  const auto tokenizer = load_hf_tokenizer(dir.write("tokenizer.json", json));
  EXPECT_EQ(tokenizer->encode("Hi \xE4\xB8\x96!"), (Ids{10, 6, 3, 4, 5, 11}));
  EXPECT_EQ(tokenizer->encode("<s>Hi"), (Ids{1, 7, 8}));  // not at the start of the input: no '▁'
  EXPECT_EQ(tokenizer->decode(Ids{10, 6, 3, 4, 5, 11}), "Hi \xE4\xB8\x96!");
}

// ------------------------------------------------------------------------------------------------
// Bad inputs: InputError naming the file
// ------------------------------------------------------------------------------------------------

TEST(TokenizerErrors, MissingFiles) {
  TempDir dir;
  expect_input_error([&] { load_tokenizer(dir.path() / "nowhere"); }, "nowhere");
  expect_input_error([&] { load_hf_tokenizer(dir.path() / "missing.json"); }, "missing.json");
  expect_input_error([&] { load_llama2c_tokenizer(dir.path() / "tok_missing.bin", 512); }, "tok_missing.bin");
  expect_input_error([&] { load_sentencepiece_tokenizer(dir.path() / "missing.model"); }, "missing.model");
  expect_input_error([&] { load_tokenizer(dir.path()); }, dir.path().filename());  // empty directory
}

TEST(TokenizerErrors, BadJson) {
  TempDir dir;
  const fs::path file = dir.write("bad.json", "{ \"model\": [1, 2,");
  expect_input_error([&] { load_hf_tokenizer(file); }, file);
  expect_input_error([&] { load_tokenizer(file); }, file);
  const fs::path no_model = dir.write("no_model.json", "{\"version\": \"1.0\"}");
  expect_input_error([&] { load_hf_tokenizer(no_model); }, no_model);
}

TEST(TokenizerErrors, UnsupportedTypes) {
  TempDir dir;
  const fs::path model = dir.write("unknown_model.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  expect_input_error([&] { load_hf_tokenizer(model); }, model, "unsupported model type 'WordPiece'");
  const fs::path pre = dir.write("unknown_pre.json",
                                 replaced(std::string(kDigitsStyle), R"("type": "Digits")", R"("type": "Whitespace")"));
  expect_input_error([&] { load_hf_tokenizer(pre); }, pre, "unsupported pre-tokenizer 'Whitespace'");
  const fs::path norm = dir.write("unknown_norm.json", replaced(std::string(kDigitsStyle), R"("normalizer": null)",
                                                                R"("normalizer": {"type": "NFKD"})"));
  expect_input_error([&] { load_hf_tokenizer(norm); }, norm, "unsupported normalizer 'NFKD'");
  const fs::path regex = dir.write(
      "bad_regex.json", replaced(split_fixture("Isolated", false), R"({"String": "-"})", R"({"Regex": "(unclosed"})"));
  expect_input_error([&] { load_hf_tokenizer(regex); }, regex, "invalid regex");
}

// A malformed model was accepted at load: "vocab": 3 iterated as one token "" (id 3), so every
// prompt encoded to nothing and `kvscope-cli generate` failed later with "the prompt is empty".
// Each of these now fails at load, naming tokenizer.json and the field.
TEST(TokenizerErrors, MalformedModelFailsAtLoadNamingTheField) {
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2})";
  const auto model = [&](const std::string& fields) { return R"({"model": {"type": "BPE", )" + fields + "}}"; };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": {"type": "BPE", "vocab": 3}})", "model.vocab must be an object of token -> id (got number 3)"},
      {model(R"("vocab": [0, 1], "merges": [])"), "model.vocab must be an object of token -> id (got array"},
      {model(R"("vocab": "a", "merges": [])"), "model.vocab must be an object of token -> id (got string"},
      {model(R"("merges": [])"), "model.vocab is missing"},
      {model(R"("vocab": {}, "merges": [])"), "model.vocab is empty"},
      {model(R"("vocab": {"a": 0, "b": -1}, "merges": [])"), "model.vocab entry 'b' has negative id -1"},
      {model(R"("vocab": {"a": 0, "b": 0}, "merges": [])"), "model.vocab entries 'a' and 'b' have the same id 0"},
      {model(vocab + R"(, "merges": "a b")"),
       "model.merges must be an array of \"a b\" strings or [\"a\", \"b\"] pairs (got string"},
      {model(vocab + R"(, "merges": {"a": "b"})"), "model.merges must be an array"},
      {model(vocab + R"(, "merges": 7)"), "model.merges must be an array"},
      {model(vocab + R"(, "merges": ["a b", 7])"),
       "model.merges[1] must be an \"a b\" string or a pair [\"a\", \"b\"] of token strings (got 7)"},
      {model(vocab + R"(, "merges": [["a", "b", "c"]])"), "model.merges[0] must be an \"a b\" string or a pair"},
      {model(vocab + R"(, "merges": [["a", 1]])"), "model.merges[0] must be an \"a b\" string or a pair"},
      {model(vocab + R"(, "merges": [{"a": "b"}])"), "model.merges[0] must be an \"a b\" string or a pair"},
      {model(vocab + R"(, "merges": ["a b", "ab"])"),
       "model.merges[1]: merge 'ab' is not two tokens separated by one space"},
      {model(vocab + R"(, "merges": ["a c"])"), "model.merges[0]: merge token 'c' is not in the vocabulary"},
      {model(R"("vocab": {"a": 0, "b": 1}, "merges": ["a b"])"),
       "model.merges[0]: merged token 'ab' is not in the vocabulary"},
      {model(vocab + R"(, "merges": [], "unk_token": 0)"), "model.unk_token must be a string or null (got number)"},
      {model(vocab + R"(, "merges": [], "byte_fallback": "yes")"),
       "model.byte_fallback must be true or false (got string)"},
      {model(vocab + R"(, "merges": [], "continuing_subword_prefix": ["#"])"),
       "model.continuing_subword_prefix must be a string"},
      {R"({"model": {"type": "Foo", "vocab": {"a": 0}}})", "unsupported model type 'Foo' (supported: BPE)"},
      {R"({"model": {"type": 7, "vocab": {"a": 0}}})", "model.type must be a string (supported: BPE), got 7"},
      {R"({"version": "1.0", "added_tokens": []})", "model is missing"},
      {R"({"model": null})", "model is missing"},
      {R"({"model": 3})", "model must be an object"},
      {R"({"model": ["BPE"]})", "model must be an object"},
  };
  for (const auto& [text, problem] : cases) {
    TempDir dir;
    const fs::path file = dir.write("tokenizer.json", text);
    SCOPED_TRACE(text);
    expect_input_error([&] { load_hf_tokenizer(file); }, file, problem);
    expect_input_error([&] { load_tokenizer(dir.path()); }, file, problem);  // what `--model DIR` loads
    expect_input_error([&] { load_hf_tokenizer_text(text, "tokenizer.json"); }, "tokenizer.json",
                       problem);  // the fuzz target's entry
  }
  // The well-formed neighbour of these cases loads and encodes (the checks reject no valid model).
  TempDir dir;
  const auto tokenizer =
      load_hf_tokenizer(dir.write("tokenizer.json", model(vocab + R"(, "merges": ["a b"], "unk_token": null)")));
  EXPECT_EQ(tokenizer->encode("abba"), (Ids{2, 1, 0}));
  EXPECT_EQ(load_hf_tokenizer(dir.write("pairs.json", model(vocab + R"(, "merges": [["a", "b"]], "unk_token": "a")")))
                ->encode("abc"),
            (Ids{2, 0}));
  EXPECT_EQ(load_hf_tokenizer(dir.write("untyped.json", R"({"model": {"vocab": {"a": 0}}})"))->encode("aa"),
            (Ids{0, 0}));
  // An unk_token outside the vocabulary loads, as in Hugging Face tokenizers, and only a text that
  // needs it fails, naming the file, the token and the character.
  const fs::path no_unk = dir.write("no_unk.json", model(vocab + R"(, "merges": ["a b"], "unk_token": "<unk>")"));
  const auto lenient = load_hf_tokenizer(no_unk);
  EXPECT_EQ(lenient->encode("abba"), (Ids{2, 1, 0}));
  expect_input_error([&] { lenient->encode("abz"); }, no_unk,
                     "model.unk_token '<unk>' is not in model.vocab, and the text has 'z'");
}

TEST(TokenizerErrors, TruncatedTokBin) {
  TempDir dir;
  const std::string bytes = read_file(stories_dir() / "tok512.bin");
  const fs::path cut = dir.write("tok_cut.bin", bytes.substr(0, 1000));
  expect_input_error([&] { load_llama2c_tokenizer(cut, 512); }, cut, "truncated");
  const fs::path short_tail = dir.write("tok_short.bin", bytes.substr(0, bytes.size() - 3));
  expect_input_error([&] { load_llama2c_tokenizer(short_tail, 512); }, short_tail, "truncated");
  expect_input_error([&] { load_tokenizer(short_tail); }, short_tail, "truncated");  // vocab size inferred
  const fs::path header_only = dir.write("tok_empty.bin", bytes.substr(0, 2));
  expect_input_error([&] { load_tokenizer(header_only); }, header_only);
}

TEST(TokenizerErrors, DirectoryWithUnusableTokenizerJson) {
  TempDir dir;
  const fs::path json = dir.write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_input_error([&] { load_tokenizer(dir.path()); }, json, "unsupported model type 'Unigram'");
#ifdef KVSCOPE_HAVE_SENTENCEPIECE
  fs::copy_file(stories_dir() / "tok512.model", dir.path() / "tokenizer.model");
  EXPECT_EQ(load_tokenizer(dir.path())->vocab_size(), 512);  // falls back to the SentencePiece model
#endif
}

TEST(TokenizerErrors, BadSentencePieceModel) {
#ifndef KVSCOPE_HAVE_SENTENCEPIECE
  GTEST_SKIP() << "built without SentencePiece";
#else
  TempDir dir;
  const fs::path file = dir.write("garbage.model", "this is not a protobuf");
  expect_input_error([&] { load_sentencepiece_tokenizer(file); }, file);
#endif
}

}  // namespace
}  // namespace kvscope
