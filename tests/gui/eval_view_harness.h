#pragma once
// The Eval view drawn headless over a session database (the Eval view tests): options applied as
// `kvscope --open DB [--run ID] --view eval` would, then frames with an optional mouse position and
// click, each waiting for the loader.
#include <cstdint>
#include <string>

#include "app_state.h"
#include "headless.h"
#include "textures.h"

namespace kvscope::gui::testing {

struct EvalViewHarness {
  /// `run` < 0: no run selected.
  explicit EvalViewHarness(const std::string& db, std::int64_t run = -1) : im(1440.0f, 900.0f) {
    s.headless = true;
    GuiOptions o;
    o.open = {db};
    if (run >= 0) o.runs = {run};
    o.view = View("eval");
    ok = apply_options(s, o);
  }
  void frame(ImVec2 mouse = {-1e6f, -1e6f}, bool click = false) {
    Ui ui{im.fonts(), textures, nullptr, nullptr};
    im.frame([&] { draw_app(s, ui); }, mouse, click);
    s.loader.wait_idle();
  }
  HeadlessImGui im;
  NullTextureStore textures;
  AppState s;
  bool ok = false;  ///< apply_options' result (s.status says why not)
};

}  // namespace kvscope::gui::testing
