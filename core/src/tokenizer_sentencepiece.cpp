// SentencePiece .model tokenizer through libsentencepiece (built only with KVSCOPE_HAVE_SENTENCEPIECE).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

#ifdef KVSCOPE_HAVE_SENTENCEPIECE
#include <dlfcn.h>

#include "../plugins/sentencepiece_plugin.h"
#endif

namespace kvscope {

#ifdef KVSCOPE_HAVE_SENTENCEPIECE
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWordBoundary = "\xE2\x96\x81";      // U+2581 '▁'
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";  // SentencePiece's default " ⁇ "

std::string replace_word_boundaries(std::string_view piece) {
  std::string out;
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.substr(pos).starts_with(kWordBoundary)) {
      out += ' ';
      pos += kWordBoundary.size();
    } else {
      out += piece[pos++];
    }
  }
  return out;
}

/// The byte of a "<0xNN>" byte piece.
unsigned char byte_of_piece(std::string_view piece) {
  return static_cast<unsigned char>(std::stoi(std::string(piece.substr(3, 2)), nullptr, 16));
}

/// The plugin's functions, resolved once per tokenizer.
struct SpmApi {
  void* lib = nullptr;
  decltype(&kvscope_spm_load) load = nullptr;
  decltype(&kvscope_spm_free) free = nullptr;
  decltype(&kvscope_spm_encode) encode = nullptr;
  decltype(&kvscope_spm_vocab_size) vocab_size = nullptr;
  decltype(&kvscope_spm_piece) piece = nullptr;
  decltype(&kvscope_spm_kind) kind = nullptr;
};

/// dlopen()s libkvscope_sentencepiece.so from beside the running executable, then from its build
/// location. Throws InputError(model_file, ...) if it cannot be found.
SpmApi open_plugin(const fs::path& model_file) {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "libkvscope_sentencepiece.so");
    candidates.push_back(exe.parent_path() / "../lib/libkvscope_sentencepiece.so");
  }
#ifdef KVSCOPE_SPM_PLUGIN_PATH
  candidates.push_back(KVSCOPE_SPM_PLUGIN_PATH);
#endif
  std::string tried;
  for (const auto& c : candidates) {
    if (!fs::exists(c)) {
      tried += " " + c.string();
      continue;
    }
    SpmApi api;
    api.lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!api.lib) throw InputError(model_file, std::string("cannot load the SentencePiece plugin: ") + ::dlerror());
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api.lib, name));
    };
    sym(api.load, "kvscope_spm_load");
    sym(api.free, "kvscope_spm_free");
    sym(api.encode, "kvscope_spm_encode");
    sym(api.vocab_size, "kvscope_spm_vocab_size");
    sym(api.piece, "kvscope_spm_piece");
    sym(api.kind, "kvscope_spm_kind");
    if (!api.load || !api.free || !api.encode || !api.vocab_size || !api.piece || !api.kind)
      throw InputError(model_file, "the SentencePiece plugin " + c.string() + " lacks kvscope_spm_* functions");
    return api;
  }
  throw InputError(model_file,
                   "the SentencePiece plugin libkvscope_sentencepiece.so was not found (looked in" + tried + ")");
}

constexpr int32_t kControl = 1, kByte = 2, kUnknown = 4;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(SpmApi api, void* handle) : api_(api), handle_(handle) {
    const std::string a = "a";
    std::vector<int32_t> probe(8);
    const int64_t n = api_.encode(handle_, a.data(), a.size(), probe.data(), 8);
    adds_dummy_prefix_ = n > 0 && std::string_view(api_.piece(handle_, probe[0])).starts_with(kWordBoundary);
  }
  ~SentencePieceTokenizer() override { api_.free(handle_); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  /// SentencePiece EncodeAsIds (its normalization and dummy prefix; no BOS/EOS). Never throws.
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size() + 8);
    const int64_t n = api_.encode(handle_, text.data(), text.size(), ids.data(), static_cast<int64_t>(ids.size()));
    if (n > static_cast<int64_t>(ids.size())) {
      ids.resize(n);
      api_.encode(handle_, text.data(), text.size(), ids.data(), n);
    }
    ids.resize(n);
    return ids;
  }

  /// Like SentencePiece's DecodeIds (control tokens give nothing, the dummy-prefix space of the
  /// first piece is dropped) except that byte pieces that do not form UTF-8 stay raw bytes.
  /// Ids outside the vocabulary are skipped. Never throws.
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    bool first_piece = true;
    for (int32_t id : ids) {
      if (!is_valid(id) || (kind(id) & kControl)) continue;
      if (kind(id) & kByte) {
        text += static_cast<char>(byte_of_piece(api_.piece(handle_, id)));
      } else if (kind(id) & kUnknown) {
        text += kUnknownSurface;
      } else {
        std::string surface = replace_word_boundaries(api_.piece(handle_, id));
        if (first_piece && adds_dummy_prefix_ && surface.starts_with(' ')) surface.erase(0, 1);
        text += surface;
      }
      first_piece = false;
    }
    return text;
  }

  /// The piece with '▁' shown as ' '; byte pieces of printable ASCII as that character.
  std::string token_text(int32_t id) const override {
    if (!is_valid(id)) return {};
    const std::string piece = api_.piece(handle_, id);
    if (kind(id) & kByte) {
      const unsigned char byte = byte_of_piece(piece);
      return byte >= 0x20 && byte < 0x7F ? std::string(1, static_cast<char>(byte)) : piece;
    }
    return replace_word_boundaries(piece);
  }

  int32_t vocab_size() const override { return api_.vocab_size(handle_); }

 private:
  bool is_valid(int32_t id) const { return id >= 0 && id < api_.vocab_size(handle_); }
  int32_t kind(int32_t id) const { return api_.kind(handle_, id); }

  SpmApi api_;
  void* handle_;
  bool adds_dummy_prefix_ = true;
};

}  // namespace

/// Loads a SentencePiece .model. encode() is SentencePiece's EncodeAsIds (no BOS/EOS).
/// Throws InputError(path, ...) if the file is missing or libsentencepiece rejects it.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_file) {
  if (!fs::is_regular_file(model_file)) {
    throw InputError(model_file, fs::exists(model_file) ? "is not a regular file" : "no such file");
  }
  const SpmApi api = open_plugin(model_file);
  char error[512] = {0};
  void* handle = api.load(model_file.c_str(), error, sizeof(error));
  if (!handle) throw InputError(model_file, std::string("not a valid SentencePiece model: ") + error);
  return std::make_unique<SentencePieceTokenizer>(api, handle);
}

#else

/// Always throws InputError(path, ...): this build of kvscope has no SentencePiece support.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_file) {
  throw InputError(model_file,
                   "kvscope was built without SentencePiece (configure with KVSCOPE_WITH_SENTENCEPIECE=ON "
                   "and libsentencepiece-dev installed)");
}

#endif

}  // namespace kvscope
