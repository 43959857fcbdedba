#pragma once
// TextureStore: where the ImGui canvas puts images (heatmap cells, colour bars, token strips). The
// app implements it over OpenGL (gl_textures.h); tests and benches without a GPU context use
// NullTextureStore. ImTextureID is whatever the renderer backend reads (GLuint for OpenGL 3).
#include <cstdint>

#include <imgui.h>

#include "kvscope/viz/canvas.h"

namespace kvscope::gui {

class TextureStore {
 public:
  virtual ~TextureStore() = default;
  /// Uploads `image` (RGBA, straight alpha) and returns its id; `linear`: bilinear filtering,
  /// else nearest (crisp cells).
  virtual ImTextureID create(const viz::Image& image, bool linear) = 0;
  /// Frees a texture create() returned.
  virtual void destroy(ImTextureID id) = 0;
};

/// Hands out ids without uploading anything (ImGui-only tests, CPU frame benchmarks).
class NullTextureStore final : public TextureStore {
 public:
  ImTextureID create(const viz::Image&, bool) override {
    ++live_;
    return reinterpret_cast<ImTextureID>(static_cast<std::intptr_t>(++next_));
  }
  void destroy(ImTextureID) override { --live_; }
  /// Textures created and not yet destroyed (leak checks in tests).
  std::int64_t live() const { return live_; }

 private:
  std::int64_t next_ = 1000, live_ = 0;
};

}  // namespace kvscope::gui
