#pragma once
// The ImGui backend of viz::Canvas, so the views draw the same viz::Figure that export writes.
//   FontSet      the fonts in the ImGui atlas that figure text is drawn with (DejaVu Sans like the
//                Cairo backend, baked at the theme's sizes; ImGui's default font if absent).
//   ImGuiCanvas  draws Canvas primitives straight into an ImDrawList at an origin.
//   Recording    a Canvas that records primitives once (layout, heatmap reduction and colouring run
//                then) and replays them each frame: a 32 x 32768 heatmap costs its reduction once,
//                not every frame. Owns the textures of its images.
//   FigureView   a figure, its layout and recording, rebuilt only when its key or size changes, plus
//                hit tests (cell, token, x value under the mouse) from the same layout.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <imgui.h>

#include "kvscope/viz/canvas.h"
#include "kvscope/viz/figure.h"
#include "kvscope/viz/layout.h"
#include "textures.h"

namespace kvscope::gui {

/// Fonts of the UI and of figure text, all in one ImGui atlas.
struct FontSet {
  struct Face {
    ImFont* font = nullptr;
    float size = 0;
    bool bold = false, italic = false;
  };
  ImFont* ui = nullptr;       ///< widgets (io.FontDefault)
  ImFont* ui_bold = nullptr;  ///< headings
  std::vector<Face> faces;    ///< figure fonts by size and style
  /// The baked face closest to `f` (same boldness/italics when baked, nearest size); never null
  /// once load_fonts ran.
  const Face& pick(const viz::Font& f) const;
};

/// Adds the UI and figure fonts to `atlas` (DejaVu Sans from /usr/share/fonts when present, else
/// ImGui's built-in font) and builds it. `ui_size` px for widgets.
FontSet load_fonts(ImFontAtlas& atlas, float ui_size = 15.0f);

/// Draws Canvas primitives into `dl`, figure px (0, 0) at `origin` (screen px).
class ImGuiCanvas final : public viz::Canvas {
 public:
  ImGuiCanvas(ImDrawList* dl, ImVec2 origin, const FontSet& fonts, TextureStore* textures, double pixel_ratio = 1.0)
      : dl_(dl), o_(origin), fonts_(fonts), tex_(textures), ratio_(pixel_ratio) {}
  viz::TextMetrics measure(std::string_view text, const viz::Font& font) override;
  void line(viz::Point a, viz::Point b, const viz::Stroke& stroke) override;
  void polyline(std::span<const viz::Point> points, const viz::Stroke& stroke) override;
  void rect(const viz::Rect& r, const viz::Stroke& stroke) override;
  void fill_rect(const viz::Rect& r, viz::Color color) override;
  void fill_polygon(std::span<const viz::Point> points, viz::Color color) override;
  void stroke_polygon(std::span<const viz::Point> points, const viz::Stroke& stroke) override;
  void fill_circle(viz::Point center, double radius, viz::Color color) override;
  void stroke_circle(viz::Point center, double radius, const viz::Stroke& stroke) override;
  void text(viz::Point anchor, std::string_view text, const viz::Font& font, viz::Color color, viz::HAlign h,
            viz::VAlign v, viz::TextDir dir) override;
  /// Uploads the image as a temporary texture (prefer Recording, which keeps it).
  void image(const viz::Rect& dst, const viz::Image& image, viz::ImageFilter filter) override;
  void push_clip(const viz::Rect& r) override;
  void pop_clip() override;
  double pixel_ratio() const override { return ratio_; }

  /// Draws an uploaded texture into dst (figure px).
  void image_texture(const viz::Rect& dst, ImTextureID id);
  /// Textures made by image() during this canvas' life (destroyed by the caller after the frame).
  std::vector<ImTextureID> take_temporaries() { return std::move(temporaries_); }

 private:
  ImVec2 p(viz::Point q) const { return {static_cast<float>(o_.x + q.x), static_cast<float>(o_.y + q.y)}; }
  void stroke_path(std::span<const viz::Point> pts, bool closed, const viz::Stroke& s);
  ImDrawList* dl_;
  ImVec2 o_;
  const FontSet& fonts_;
  TextureStore* tex_;
  double ratio_;
  std::vector<ImTextureID> temporaries_;
};

/// Text metrics of `text` in `font` from the font set (what ImGuiCanvas and Recording measure).
viz::TextMetrics measure_text(const FontSet& fonts, std::string_view text, const viz::Font& font);

/// Records Canvas calls for replay. Owns copies of its images and, after the first replay, their
/// textures (destroyed with the recording).
class Recording final : public viz::Canvas {
 public:
  explicit Recording(const FontSet& fonts, double pixel_ratio = 1.0) : fonts_(&fonts), ratio_(pixel_ratio) {}
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  Recording(Recording&& o) noexcept;
  Recording& operator=(Recording&& o) noexcept;
  ~Recording() override;

  viz::TextMetrics measure(std::string_view text, const viz::Font& font) override;
  void line(viz::Point a, viz::Point b, const viz::Stroke& stroke) override;
  void polyline(std::span<const viz::Point> points, const viz::Stroke& stroke) override;
  void rect(const viz::Rect& r, const viz::Stroke& stroke) override;
  void fill_rect(const viz::Rect& r, viz::Color color) override;
  void fill_polygon(std::span<const viz::Point> points, viz::Color color) override;
  void stroke_polygon(std::span<const viz::Point> points, const viz::Stroke& stroke) override;
  void fill_circle(viz::Point center, double radius, viz::Color color) override;
  void stroke_circle(viz::Point center, double radius, const viz::Stroke& stroke) override;
  void text(viz::Point anchor, std::string_view text, const viz::Font& font, viz::Color color, viz::HAlign h,
            viz::VAlign v, viz::TextDir dir) override;
  void image(const viz::Rect& dst, const viz::Image& image, viz::ImageFilter filter) override;
  void push_clip(const viz::Rect& r) override;
  void pop_clip() override;
  double pixel_ratio() const override { return ratio_; }

  /// Draws everything recorded into `dl` with figure (0, 0) at `origin`; uploads images on first use.
  void replay(ImDrawList* dl, ImVec2 origin, TextureStore& textures);
  /// Frees the textures (also done by the destructor).
  void release();
  std::size_t commands() const { return cmds_.size(); }

 private:
  enum class Op : std::uint8_t {
    kLine,
    kPolyline,
    kRect,
    kFillRect,
    kFillPoly,
    kStrokePoly,
    kFillCircle,
    kStrokeCircle,
    kText,
    kImage,
    kPushClip,
    kPopClip
  };
  struct Cmd {
    explicit Cmd(Op o) : op(o) {}
    Op op;
    viz::Stroke stroke{};
    viz::Color color{};
    viz::Rect r{};            // rects, clip, image dst; line: (x, y) = a, (w, h) = b; circle: x, y, w = radius
    std::uint32_t first = 0;  // points / text / image index
    std::uint32_t count = 0;
    viz::Font font{};
    viz::HAlign h = viz::HAlign::Left;
    viz::VAlign v = viz::VAlign::Top;
    viz::TextDir dir = viz::TextDir::Horizontal;
    bool linear = false;
  };
  const FontSet* fonts_;
  double ratio_;
  std::vector<Cmd> cmds_;
  std::vector<viz::Point> points_;
  std::vector<std::string> texts_;
  std::vector<viz::Image> images_;
  std::vector<ImTextureID> textures_;  // parallel to images_ after the first replay
  TextureStore* store_ = nullptr;
};

/// What lies under a point of a figure.
struct FigureHit {
  int panel = -1;
  double x = 0, y = 0;              ///< data coordinates (heatmap: column / row coordinates)
  std::int64_t row = -1, col = -1;  ///< heatmap cell
  std::int64_t token = -1;          ///< token strip: token index
  std::int64_t position = -1;       ///< token strip: that token's position (first_position + token)
};

/// A figure shown in a view: rebuilt when `key` or the size changes, laid out and recorded once.
class FigureView {
 public:
  /// Builds (if needed) and draws the figure into the current window at the cursor, taking
  /// `size` px (the figure's width/height are set to it). Returns true when rebuilt this frame.
  bool draw(const std::string& key, ImVec2 size, const std::function<viz::Figure()>& build, const FontSet& fonts,
            TextureStore& textures);
  /// The figure as last built (what export writes).
  const viz::Figure& figure() const { return fig_; }
  bool valid() const { return built_; }
  const viz::FigureLayout& layout() const { return layout_; }
  /// Screen position of figure (0, 0) in the last draw.
  ImVec2 origin() const { return origin_; }
  /// What is under screen point `p` (nullopt outside every panel's plot area).
  std::optional<FigureHit> hit(ImVec2 p) const;
  /// Screen rectangle of heatmap cell (row, col) in panel `panel` (for selection outlines).
  std::optional<viz::Rect> cell_rect(int panel, std::int64_t row, std::int64_t col) const;
  /// Drops the cached figure (next draw rebuilds).
  void invalidate() { key_.clear(); }
  /// Error of the last build (an invalid figure), shown in place of the figure.
  const std::string& error() const { return error_; }
  /// Rebuild count (tests, benches).
  std::int64_t builds() const { return builds_; }

 private:
  std::string key_;
  ImVec2 size_{0, 0};
  viz::Figure fig_;
  viz::FigureLayout layout_;
  std::optional<Recording> rec_;
  ImVec2 origin_{0, 0};
  bool built_ = false;
  std::string error_;
  std::int64_t builds_ = 0;
};

/// ImGui colour of a viz colour.
inline ImU32 im_color(viz::Color c) { return IM_COL32(c.r, c.g, c.b, c.a); }

}  // namespace kvscope::gui
