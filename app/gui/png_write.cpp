#include "png_write.h"

#include <cairo.h>

#include <cstring>
#include <stdexcept>

namespace kvscope::gui {

void write_png(const std::string& path, const std::vector<std::uint8_t>& rgba, int width, int height, bool bottom_up) {
  if (width <= 0 || height <= 0 || rgba.size() < static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 4)
    throw std::runtime_error(path + ": bad image size");
  cairo_surface_t* surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
  if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(surf);
    throw std::runtime_error(path + ": cannot create an image surface");
  }
  cairo_surface_flush(surf);
  unsigned char* dst = cairo_image_surface_get_data(surf);
  const int stride = cairo_image_surface_get_stride(surf);
  for (int y = 0; y < height; ++y) {
    const std::uint8_t* src = rgba.data() + static_cast<std::size_t>(bottom_up ? height - 1 - y : y) * width * 4;
    auto* row = reinterpret_cast<std::uint32_t*>(dst + static_cast<std::size_t>(y) * stride);
    for (int x = 0; x < width; ++x) {
      const std::uint8_t* p = src + x * 4;
      row[x] = 0xff000000u | (std::uint32_t(p[0]) << 16) | (std::uint32_t(p[1]) << 8) | std::uint32_t(p[2]);
    }
  }
  cairo_surface_mark_dirty(surf);
  const cairo_status_t st = cairo_surface_write_to_png(surf, path.c_str());
  cairo_surface_destroy(surf);
  if (st != CAIRO_STATUS_SUCCESS) throw std::runtime_error(path + ": " + cairo_status_to_string(st));
}

}  // namespace kvscope::gui
