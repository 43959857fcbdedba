#include "imgui_canvas.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>

#include "kvscope/viz/draw.h"

namespace kvscope::gui {
namespace {

// Unicode blocks figure and token text use (viz escapes: arrows, U+2205, U+2423, U+2026, U+FFFD;
// byte-level BPE pieces: Latin Extended-A).
const ImWchar kGlyphRanges[] = {
    0x0020, 0x00FF,  // Basic Latin, Latin-1
    0x0100, 0x024F,  // Latin Extended-A/B
    0x0300, 0x036F,  // Combining diacritical marks (q\u0304)
    0x0370, 0x03FF,  // Greek
    0x0400, 0x04FF,  // Cyrillic
    0x2000, 0x206F,  // General punctuation
    0x2190, 0x21FF,  // Arrows
    0x2200, 0x22FF,  // Mathematical operators
    0x2400, 0x243F,  // Control pictures
    0x25A0, 0x25FF,  // Geometric shapes
    0xFFFD, 0xFFFD,  // Replacement character
    0,
};

std::string find_font(const char* file) {
  for (const char* dir : {"/usr/share/fonts/truetype/dejavu/", "/usr/share/fonts/dejavu/", "/usr/local/share/fonts/"}) {
    std::error_code ec;
    const std::string p = std::string(dir) + file;
    if (std::filesystem::exists(p, ec)) return p;
  }
  return {};
}

ImVec2 rounded(ImVec2 v) { return {std::round(v.x), std::round(v.y)}; }

}  // namespace

const FontSet::Face& FontSet::pick(const viz::Font& f) const {
  static const Face none{};
  if (faces.empty()) return none;
  const Face* best = nullptr;
  double best_cost = 1e30;
  for (const auto& face : faces) {
    const double style = (face.bold != f.bold ? 100.0 : 0.0) + (face.italic != f.italic ? 50.0 : 0.0);
    // Prefer a baked size at or just above the request (downscaling stays sharper than upscaling).
    const double d = face.size - f.size;
    const double cost = style + (d >= 0 ? d : -2.0 * d);
    if (cost < best_cost) best_cost = cost, best = &face;
  }
  return *best;
}

FontSet load_fonts(ImFontAtlas& atlas, float ui_size) {
  FontSet fs;
  const std::string regular = find_font("DejaVuSans.ttf"), bold = find_font("DejaVuSans-Bold.ttf"),
                    italic = find_font("DejaVuSans-Oblique.ttf");
  auto add = [&](const std::string& path, float size, int oversample) -> ImFont* {
    if (path.empty()) return nullptr;
    ImFontConfig cfg;
    cfg.OversampleH = oversample;
    cfg.OversampleV = 1;
    cfg.PixelSnapH = oversample == 1;
    return atlas.AddFontFromFileTTF(path.c_str(), size, &cfg, kGlyphRanges);
  };
  fs.ui = add(regular, ui_size, 2);
  if (!fs.ui) {
    // No DejaVu: ImGui's built-in font for everything (ASCII only).
    fs.ui = atlas.AddFontDefault();
    fs.ui_bold = fs.ui;
    fs.faces.push_back({fs.ui, 13.0f, false, false});
    atlas.Build();
    return fs;
  }
  fs.ui_bold = bold.empty() ? fs.ui : add(bold, ui_size, 2);
  for (float s : {10.5f, 11.0f, 12.0f, 13.5f}) fs.faces.push_back({add(regular, s, 1), s, false, false});
  fs.faces.push_back({fs.ui, ui_size, false, false});
  if (!bold.empty())
    for (float s : {13.5f, 17.0f}) fs.faces.push_back({add(bold, s, 1), s, true, false});
  if (!italic.empty()) fs.faces.push_back({add(italic, 10.5f, 1), 10.5f, false, true});
  atlas.Build();
  return fs;
}

viz::TextMetrics measure_text(const FontSet& fonts, std::string_view text, const viz::Font& font) {
  const auto& face = fonts.pick(font);
  if (!face.font) return {text.size() * font.size * 0.55, font.size * 0.8, font.size * 0.2};
  const float size = static_cast<float>(font.size);
  const float k = size / face.font->FontSize;
  const ImVec2 sz = face.font->CalcTextSizeA(size, FLT_MAX, 0.0f, text.data(), text.data() + text.size());
  return {sz.x, face.font->Ascent * k, -face.font->Descent * k};
}

// ---- ImGuiCanvas --------------------------------------------------------------------------------

viz::TextMetrics ImGuiCanvas::measure(std::string_view text, const viz::Font& font) {
  return measure_text(fonts_, text, font);
}

void ImGuiCanvas::stroke_path(std::span<const viz::Point> pts, bool closed, const viz::Stroke& s) {
  if (s.style == viz::LineStyle::None || pts.size() < 2 || s.color.a == 0) return;
  const ImU32 col = im_color(s.color);
  const float w = static_cast<float>(std::max(s.width, 0.5));
  if (s.style == viz::LineStyle::Solid) {
    std::vector<ImVec2> v(pts.size());
    for (std::size_t i = 0; i < pts.size(); ++i) v[i] = p(pts[i]);
    dl_->AddPolyline(v.data(), static_cast<int>(v.size()), col, closed ? ImDrawFlags_Closed : ImDrawFlags_None, w);
    return;
  }
  // Dashes as in the Cairo backend: dashed 4w on / 2.5w off; dotted: round dots every 2.2w.
  const bool dotted = s.style == viz::LineStyle::Dotted;
  const double on = dotted ? 0.0 : 4 * w, off = dotted ? 2.2 * w : 2.5 * w, period = on + off;
  double phase = 0;
  const std::size_t n = pts.size() + (closed ? 1 : 0);
  for (std::size_t i = 1; i < n; ++i) {
    const viz::Point a = pts[i - 1], b = pts[i % pts.size()];
    const double len = std::hypot(b.x - a.x, b.y - a.y);
    if (len <= 0) continue;
    const double ux = (b.x - a.x) / len, uy = (b.y - a.y) / len;
    double t = 0;
    while (t < len) {
      const double in_period = std::fmod(phase + t, period);
      if (dotted) {
        const double to_dot = in_period == 0 ? 0 : period - in_period;
        if (t + to_dot > len) break;
        t += to_dot;
        dl_->AddCircleFilled(p({a.x + ux * t, a.y + uy * t}), w * 0.5f, col, 6);
        t += period * 0.999;
        continue;
      }
      if (in_period < on) {
        const double e = std::min(len, t + (on - in_period));
        dl_->AddLine(p({a.x + ux * t, a.y + uy * t}), p({a.x + ux * e, a.y + uy * e}), col, w);
        t = e;
      } else {
        t += period - in_period;
      }
    }
    phase += len;
  }
}

void ImGuiCanvas::line(viz::Point a, viz::Point b, const viz::Stroke& stroke) {
  if (stroke.style == viz::LineStyle::Solid) {
    if (stroke.color.a)
      dl_->AddLine(p(a), p(b), im_color(stroke.color), static_cast<float>(std::max(stroke.width, 0.5)));
    return;
  }
  const viz::Point pts[] = {a, b};
  stroke_path(pts, false, stroke);
}

void ImGuiCanvas::polyline(std::span<const viz::Point> points, const viz::Stroke& stroke) {
  stroke_path(points, false, stroke);
}

void ImGuiCanvas::rect(const viz::Rect& r, const viz::Stroke& stroke) {
  if (r.empty() && (r.w < 0 || r.h < 0)) return;
  if (stroke.style == viz::LineStyle::Solid) {
    if (stroke.color.a)
      dl_->AddRect(p({r.x, r.y}), p({r.right(), r.bottom()}), im_color(stroke.color), 0.0f, 0,
                   static_cast<float>(std::max(stroke.width, 0.5)));
    return;
  }
  const viz::Point pts[] = {{r.x, r.y}, {r.right(), r.y}, {r.right(), r.bottom()}, {r.x, r.bottom()}};
  stroke_path(pts, true, stroke);
}

void ImGuiCanvas::fill_rect(const viz::Rect& r, viz::Color color) {
  if (r.empty() || color.a == 0) return;
  dl_->AddRectFilled(p({r.x, r.y}), p({r.right(), r.bottom()}), im_color(color));
}

void ImGuiCanvas::fill_polygon(std::span<const viz::Point> points, viz::Color color) {
  if (points.size() < 3 || color.a == 0) return;
  std::vector<ImVec2> v(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) v[i] = p(points[i]);
  dl_->AddConvexPolyFilled(v.data(), static_cast<int>(v.size()), im_color(color));
}

void ImGuiCanvas::stroke_polygon(std::span<const viz::Point> points, const viz::Stroke& stroke) {
  stroke_path(points, true, stroke);
}

void ImGuiCanvas::fill_circle(viz::Point center, double radius, viz::Color color) {
  if (color.a == 0 || radius <= 0) return;
  dl_->AddCircleFilled(p(center), static_cast<float>(radius), im_color(color), radius < 4 ? 8 : 0);
}

void ImGuiCanvas::stroke_circle(viz::Point center, double radius, const viz::Stroke& stroke) {
  if (stroke.color.a == 0 || radius <= 0 || stroke.style == viz::LineStyle::None) return;
  dl_->AddCircle(p(center), static_cast<float>(radius), im_color(stroke.color), radius < 4 ? 8 : 0,
                 static_cast<float>(std::max(stroke.width, 0.5)));
}

void ImGuiCanvas::text(viz::Point anchor, std::string_view text, const viz::Font& font, viz::Color color, viz::HAlign h,
                       viz::VAlign v, viz::TextDir dir) {
  if (text.empty() || color.a == 0) return;
  const auto& face = fonts_.pick(font);
  if (!face.font) return;
  const viz::TextMetrics tm = measure(text, font);
  const double ox = h == viz::HAlign::Left ? 0 : h == viz::HAlign::Center ? -tm.width / 2 : -tm.width;
  // Baseline below the anchor as in the Cairo backend, then up by the ascent to the line's top.
  const double base = v == viz::VAlign::Top        ? tm.ascent
                      : v == viz::VAlign::Middle   ? (tm.ascent - tm.descent) / 2
                      : v == viz::VAlign::Baseline ? 0
                                                   : -tm.descent;
  const double oy = base - tm.ascent;
  const ImVec2 a = rounded(p(anchor));
  const float size = static_cast<float>(font.size);
  if (dir == viz::TextDir::Horizontal) {
    dl_->AddText(face.font, size, rounded({a.x + static_cast<float>(ox), a.y + static_cast<float>(oy)}),
                 im_color(color), text.data(), text.data() + text.size());
    return;
  }
  // Rotated 90 degrees counter-clockwise about the anchor: lay the glyphs out horizontally with
  // ImFont::RenderText (its culling rectangle unbounded, so glyphs that only land on screen after
  // the turn are kept; the draw command keeps the real clip), then turn the new vertices:
  // (dx, dy) -> (dy, -dx).
  const int first = dl_->VtxBuffer.Size;
  face.font->RenderText(dl_, size, {a.x + static_cast<float>(ox), a.y + static_cast<float>(oy)}, im_color(color),
                        ImVec4(-1e7f, -1e7f, 1e7f, 1e7f), text.data(), text.data() + text.size(), 0.0f, false);
  for (int i = first; i < dl_->VtxBuffer.Size; ++i) {
    ImVec2& q = dl_->VtxBuffer[i].pos;
    const float dx = q.x - a.x, dy = q.y - a.y;
    q = {a.x + dy, a.y - dx};
  }
}

void ImGuiCanvas::image(const viz::Rect& dst, const viz::Image& image, viz::ImageFilter filter) {
  if (!tex_ || dst.empty() || image.width <= 0 || image.height <= 0) return;
  const ImTextureID id = tex_->create(image, filter == viz::ImageFilter::Linear);
  temporaries_.push_back(id);
  image_texture(dst, id);
}

void ImGuiCanvas::image_texture(const viz::Rect& dst, ImTextureID id) {
  if (dst.empty()) return;
  dl_->AddImage(id, p({dst.x, dst.y}), p({dst.right(), dst.bottom()}));
}

void ImGuiCanvas::push_clip(const viz::Rect& r) {
  dl_->PushClipRect(p({r.x, r.y}), p({r.x + std::max(r.w, 0.0), r.y + std::max(r.h, 0.0)}), true);
}

void ImGuiCanvas::pop_clip() { dl_->PopClipRect(); }

// ---- Recording ----------------------------------------------------------------------------------

Recording::Recording(Recording&& o) noexcept
    : fonts_(o.fonts_),
      ratio_(o.ratio_),
      cmds_(std::move(o.cmds_)),
      points_(std::move(o.points_)),
      texts_(std::move(o.texts_)),
      images_(std::move(o.images_)),
      textures_(std::move(o.textures_)),
      store_(o.store_) {
  o.textures_.clear();
  o.store_ = nullptr;
}

Recording& Recording::operator=(Recording&& o) noexcept {
  if (this != &o) {
    release();
    fonts_ = o.fonts_;
    ratio_ = o.ratio_;
    cmds_ = std::move(o.cmds_);
    points_ = std::move(o.points_);
    texts_ = std::move(o.texts_);
    images_ = std::move(o.images_);
    textures_ = std::move(o.textures_);
    store_ = o.store_;
    o.textures_.clear();
    o.store_ = nullptr;
  }
  return *this;
}

Recording::~Recording() { release(); }

void Recording::release() {
  if (store_)
    for (ImTextureID id : textures_)
      if (id) store_->destroy(id);
  textures_.clear();
  store_ = nullptr;
}

viz::TextMetrics Recording::measure(std::string_view text, const viz::Font& font) {
  return measure_text(*fonts_, text, font);
}

void Recording::line(viz::Point a, viz::Point b, const viz::Stroke& stroke) {
  Cmd c{Op::kLine};
  c.stroke = stroke;
  c.r = {a.x, a.y, b.x, b.y};
  cmds_.push_back(c);
}

void Recording::polyline(std::span<const viz::Point> points, const viz::Stroke& stroke) {
  Cmd c{Op::kPolyline};
  c.stroke = stroke;
  c.first = static_cast<std::uint32_t>(points_.size());
  c.count = static_cast<std::uint32_t>(points.size());
  points_.insert(points_.end(), points.begin(), points.end());
  cmds_.push_back(c);
}

void Recording::rect(const viz::Rect& r, const viz::Stroke& stroke) {
  Cmd c{Op::kRect};
  c.stroke = stroke;
  c.r = r;
  cmds_.push_back(c);
}

void Recording::fill_rect(const viz::Rect& r, viz::Color color) {
  Cmd c{Op::kFillRect};
  c.color = color;
  c.r = r;
  cmds_.push_back(c);
}

void Recording::fill_polygon(std::span<const viz::Point> points, viz::Color color) {
  Cmd c{Op::kFillPoly};
  c.color = color;
  c.first = static_cast<std::uint32_t>(points_.size());
  c.count = static_cast<std::uint32_t>(points.size());
  points_.insert(points_.end(), points.begin(), points.end());
  cmds_.push_back(c);
}

void Recording::stroke_polygon(std::span<const viz::Point> points, const viz::Stroke& stroke) {
  Cmd c{Op::kStrokePoly};
  c.stroke = stroke;
  c.first = static_cast<std::uint32_t>(points_.size());
  c.count = static_cast<std::uint32_t>(points.size());
  points_.insert(points_.end(), points.begin(), points.end());
  cmds_.push_back(c);
}

void Recording::fill_circle(viz::Point center, double radius, viz::Color color) {
  Cmd c{Op::kFillCircle};
  c.color = color;
  c.r = {center.x, center.y, radius, 0};
  cmds_.push_back(c);
}

void Recording::stroke_circle(viz::Point center, double radius, const viz::Stroke& stroke) {
  Cmd c{Op::kStrokeCircle};
  c.stroke = stroke;
  c.r = {center.x, center.y, radius, 0};
  cmds_.push_back(c);
}

void Recording::text(viz::Point anchor, std::string_view text, const viz::Font& font, viz::Color color, viz::HAlign h,
                     viz::VAlign v, viz::TextDir dir) {
  Cmd c{Op::kText};
  c.color = color;
  c.r = {anchor.x, anchor.y, 0, 0};
  c.font = font;
  c.h = h;
  c.v = v;
  c.dir = dir;
  c.first = static_cast<std::uint32_t>(texts_.size());
  texts_.emplace_back(text);
  cmds_.push_back(c);
}

void Recording::image(const viz::Rect& dst, const viz::Image& image, viz::ImageFilter filter) {
  Cmd c{Op::kImage};
  c.r = dst;
  c.linear = filter == viz::ImageFilter::Linear;
  c.first = static_cast<std::uint32_t>(images_.size());
  images_.push_back(image);
  cmds_.push_back(c);
}

void Recording::push_clip(const viz::Rect& r) {
  Cmd c{Op::kPushClip};
  c.r = r;
  cmds_.push_back(c);
}

void Recording::pop_clip() { cmds_.push_back(Cmd{Op::kPopClip}); }

void Recording::replay(ImDrawList* dl, ImVec2 origin, TextureStore& textures) {
  if (store_ && store_ != &textures) release();
  store_ = &textures;
  if (textures_.size() != images_.size()) textures_.assign(images_.size(), ImTextureID{});
  ImGuiCanvas cv(dl, origin, *fonts_, &textures, ratio_);
  for (const Cmd& c : cmds_) {
    const std::span<const viz::Point> pts(points_.data() + c.first, c.count);
    switch (c.op) {
      case Op::kLine:
        cv.line({c.r.x, c.r.y}, {c.r.w, c.r.h}, c.stroke);
        break;
      case Op::kPolyline:
        cv.polyline(pts, c.stroke);
        break;
      case Op::kRect:
        cv.rect(c.r, c.stroke);
        break;
      case Op::kFillRect:
        cv.fill_rect(c.r, c.color);
        break;
      case Op::kFillPoly:
        cv.fill_polygon(pts, c.color);
        break;
      case Op::kStrokePoly:
        cv.stroke_polygon(pts, c.stroke);
        break;
      case Op::kFillCircle:
        cv.fill_circle({c.r.x, c.r.y}, c.r.w, c.color);
        break;
      case Op::kStrokeCircle:
        cv.stroke_circle({c.r.x, c.r.y}, c.r.w, c.stroke);
        break;
      case Op::kText:
        cv.text({c.r.x, c.r.y}, texts_[c.first], c.font, c.color, c.h, c.v, c.dir);
        break;
      case Op::kImage: {
        ImTextureID& id = textures_[c.first];
        if (!id) id = textures.create(images_[c.first], c.linear);
        cv.image_texture(c.r, id);
        break;
      }
      case Op::kPushClip:
        cv.push_clip(c.r);
        break;
      case Op::kPopClip:
        cv.pop_clip();
        break;
    }
  }
}

// ---- FigureView ---------------------------------------------------------------------------------

bool FigureView::draw(const std::string& key, ImVec2 size, const std::function<viz::Figure()>& build,
                      const FontSet& fonts, TextureStore& textures) {
  size = {std::floor(std::max(size.x, 80.0f)), std::floor(std::max(size.y, 60.0f))};
  bool rebuilt = false;
  if (key != key_ || size.x != size_.x || size.y != size_.y || (!rec_ && error_.empty())) {
    key_ = key;
    size_ = size;
    ++builds_;
    rebuilt = true;
    try {
      fig_ = build();
      fig_.width = static_cast<int>(size.x);
      fig_.height = static_cast<int>(size.y);
      viz::validate(fig_);
      Recording rec(fonts,
                    ImGui::GetIO().DisplayFramebufferScale.x > 0 ? ImGui::GetIO().DisplayFramebufferScale.x : 1.0);
      layout_ = viz::layout_figure(fig_, rec);
      viz::draw_figure(fig_, layout_, rec);
      rec_.emplace(std::move(rec));
      built_ = true;
      error_.clear();
    } catch (const std::exception& e) {
      rec_.reset();
      built_ = false;
      error_ = e.what();
    }
  }
  origin_ = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##figure", size);
  if (rec_) {
    rec_->replay(ImGui::GetWindowDrawList(), origin_, textures);
  } else if (!error_.empty()) {
    ImGui::GetWindowDrawList()->AddText({origin_.x + 8, origin_.y + 8}, IM_COL32(180, 30, 30, 255), error_.c_str());
  }
  return rebuilt;
}

std::optional<FigureHit> FigureView::hit(ImVec2 sp) const {
  if (!built_) return std::nullopt;
  const viz::Point q{sp.x - origin_.x, sp.y - origin_.y};
  for (std::size_t i = 0; i < layout_.panels.size() && i < fig_.panels.size(); ++i) {
    const viz::PanelLayout& L = layout_.panels[i];
    if (!L.plot.contains(q)) continue;
    FigureHit h;
    h.panel = static_cast<int>(i);
    h.x = L.x.map.to_data(q.x);
    h.y = L.y.map.to_data(q.y);
    if (const auto* hm = std::get_if<viz::Heatmap>(&fig_.panels[i])) {
      if (hm->rows <= 0 || hm->cols <= 0) return std::nullopt;
      h.col = std::clamp<std::int64_t>(std::llround((h.x - hm->x_origin) / hm->x_step), 0, hm->cols - 1);
      h.row = std::clamp<std::int64_t>(std::llround((h.y - hm->y_origin) / hm->y_step), 0, hm->rows - 1);
    } else if (const auto* ts = std::get_if<viz::TokenStrip>(&fig_.panels[i])) {
      const viz::TokenStripLayout& T = L.tokens;
      const std::int64_t n = static_cast<std::int64_t>(!ts->tokens.empty()     ? ts->tokens.size()
                                                       : !ts->category.empty() ? ts->category.size()
                                                                               : ts->values.size());
      if (!T.bars) {
        for (std::size_t k = 0; k < T.boxes.size(); ++k)
          if (T.boxes[k].contains(q)) h.token = static_cast<std::int64_t>(k);
      } else if (T.row_pitch > 0 && T.cell_w > 0) {
        const auto row = static_cast<std::int64_t>((q.y - L.plot.y) / T.row_pitch);
        const auto cell = static_cast<std::int64_t>((q.x - L.plot.x) / T.cell_w);
        if (row >= 0 && row < T.rows && cell >= 0 && cell < T.cells_per_row) {
          std::int64_t t = (row * T.cells_per_row + cell) * T.per_cell;
          // One row under a position axis: the token under the mouse, not its cell's first.
          if (ts->single_row && T.rows == 1)
            t = std::clamp<std::int64_t>(std::llround(h.x) - ts->first_position, t, t + T.per_cell - 1);
          if (t < n) h.token = t;
        }
      }
      if (h.token >= 0) h.position = ts->first_position + h.token;
    }
    return h;
  }
  return std::nullopt;
}

std::optional<viz::Rect> FigureView::cell_rect(int panel, std::int64_t row, std::int64_t col) const {
  if (!built_ || panel < 0 || panel >= static_cast<int>(fig_.panels.size())) return std::nullopt;
  const auto* hm = std::get_if<viz::Heatmap>(&fig_.panels[static_cast<std::size_t>(panel)]);
  if (!hm || row < 0 || col < 0 || row >= hm->rows || col >= hm->cols) return std::nullopt;
  const viz::PanelLayout& L = layout_.panels[static_cast<std::size_t>(panel)];
  const double cx = hm->x_origin + static_cast<double>(col) * hm->x_step;
  const double cy = hm->y_origin + static_cast<double>(row) * hm->y_step;
  double x0 = L.x.map.to_px(cx - hm->x_step / 2), x1 = L.x.map.to_px(cx + hm->x_step / 2);
  double y0 = L.y.map.to_px(cy - hm->y_step / 2), y1 = L.y.map.to_px(cy + hm->y_step / 2);
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  return viz::Rect{origin_.x + x0, origin_.y + y0, x1 - x0, y1 - y0};
}

}  // namespace kvscope::gui
