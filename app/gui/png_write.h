#pragma once
// Writes an RGBA8 framebuffer read back with glReadPixels (bottom row first) as a PNG, through Cairo.
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::gui {

/// `rgba`: width*height*4 bytes, rows bottom to top when `bottom_up` (OpenGL), alpha ignored (the
/// PNG is opaque). Throws std::runtime_error naming `path` on failure.
void write_png(const std::string& path, const std::vector<std::uint8_t>& rgba, int width, int height, bool bottom_up);

}  // namespace kvscope::gui
