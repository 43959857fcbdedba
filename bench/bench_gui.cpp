// bench_gui: time to open a large session and CPU frame time of every view (ImGui context without
// a window: NewFrame + panels + Render, i.e. everything but the GPU draw), on a synthetic session
// of 32 layers x 32 KV heads x 32K prompt tokens with full capture by default.
//   bench_gui [--layers L] [--kv-heads K] [--heads H] [--tokens T] [--head-dim D] [--steps S] [--frames N]
//             [--size WxH] [--db PATH (reused when it exists)]
// Open time: from opening the database to the first frame of the heaviest view (keys) drawn with
// its data (the run's light part is read on the UI thread, the layer's parts decoded on the
// loader thread meanwhile). Then one line per view: time until its data is drawn and the longest
// frame meanwhile (the UI never waits for decoding), steady-state mean / p95 / max with the mouse
// sweeping the view (hover tooltips), and a selection change to another layer (decode + rebuild).
// Targets: open < 1 s; the heaviest view's steady frame <= 16 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app_state.h"
#include "headless.h"
#include "kvscope/core/tokenizer.h"
#include "synthetic.h"

namespace {

using namespace kvscope::gui;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  SyntheticSpec spec;
  spec.n_layer = 32;
  spec.n_head = 32;
  spec.n_head_kv = 32;
  spec.head_dim = 128;
  spec.n_tok = 32768;
  spec.n_steps = 256;
  int frames = 120, width = 1600, height = 1000;
  std::string db = (std::filesystem::temp_directory_path() / "kvscope_bench_gui.db").string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: missing value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--layers")
      spec.n_layer = std::stoll(next());
    else if (a == "--kv-heads")
      spec.n_head_kv = std::stoll(next());
    else if (a == "--heads")
      spec.n_head = std::stoll(next());
    else if (a == "--tokens")
      spec.n_tok = std::stoll(next());
    else if (a == "--head-dim")
      spec.head_dim = std::stoll(next());
    else if (a == "--steps")
      spec.n_steps = std::stoll(next());
    else if (a == "--frames")
      frames = std::stoi(next());
    else if (a == "--db")
      db = next();
    else if (a == "--size") {
      const std::string v = next();
      width = std::stoi(v.substr(0, v.find('x')));
      height = std::stoi(v.substr(v.find('x') + 1));
    } else {
      std::fprintf(stderr,
                   "usage: bench_gui [--layers L] [--kv-heads K] [--heads H] [--tokens T] [--head-dim D] [--steps S] "
                   "[--frames N] "
                   "[--size WxH] [--db PATH]\n");
      return 2;
    }
  }
  spec.n_head = std::max(spec.n_head, spec.n_head_kv);

  std::printf(
      "bench_gui: %lld layers x %lld KV heads x %lld tokens, head_dim %lld, full capture; window %dx%d; %d "
      "frames/view\n",
      static_cast<long long>(spec.n_layer), static_cast<long long>(spec.n_head_kv), static_cast<long long>(spec.n_tok),
      static_cast<long long>(spec.head_dim), width, height, frames);
  if (!std::filesystem::exists(db)) {
    // Real token texts (their widths matter for the token view): the embedded model's tokenizer.
    std::unique_ptr<kvscope::Tokenizer> tok;
#ifdef KVSCOPE_SOURCE_DIR
    const std::filesystem::path model =
        (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "assets/models/pycode-16m").lexically_normal();
    if (std::filesystem::exists(model / "tokenizer.json")) {
      tok = kvscope::load_tokenizer(model);
      spec.model_path = model.string();
      spec.prompt_text = read_text(model / "golden/prompts/filler.py");
    }
#endif
    const auto t0 = Clock::now();
    write_synthetic_session(db, spec, tok.get());
    std::printf("  wrote %s in %.1f s (%.0f MiB)\n", db.c_str(), ms_since(t0) / 1000.0,
                static_cast<double>(std::filesystem::file_size(db)) / 1048576.0);
  } else {
    std::printf("  reusing %s\n", db.c_str());
  }

  HeadlessImGui im(static_cast<float>(width), static_cast<float>(height));
  NullTextureStore textures;
  Ui ui{im.fonts(), textures, nullptr, nullptr};
  AppState s;
  s.headless = true;

  // Frames until the loader has decoded what the current view asked for and the view has drawn it
  // (one frame after the loader went idle). Returns wall ms; `max_frame` = the longest frame meanwhile.
  auto until_drawn = [&](double& max_frame, int& n_frames, ImVec2 mouse = {-1e6f, -1e6f}) {
    const auto t0 = Clock::now();
    max_frame = 0;
    n_frames = 0;
    bool idle_seen = false;
    while (ms_since(t0) < 60000) {
      const bool idle = !s.loader.busy();
      const auto f0 = Clock::now();
      im.frame([&] { draw_app(s, ui); }, mouse);
      max_frame = std::max(max_frame, ms_since(f0));
      ++n_frames;
      if (idle_seen && idle) break;
      idle_seen = idle && n_frames >= 2;  // the tab switch lands on the second frame
    }
    return ms_since(t0);
  };

  // Open: database, run list and run A's light part on the UI thread, then frames of the heaviest
  // view (keys) until it is drawn with its data decoded on the loader thread.
  GuiOptions o;
  o.open = {db};
  o.view = View::kKeys;
  o.layer = 1;
  o.head = 1;
  const auto t_open = Clock::now();
  if (!apply_options(s, o) || !s.a) {
    std::fprintf(stderr, "bench_gui: cannot open %s: %s\n", db.c_str(), s.status.c_str());
    return 1;
  }
  const double open_ui_ms = ms_since(t_open);
  const auto f0 = Clock::now();
  im.frame([&] { draw_app(s, ui); });
  const double first_frame_ms = ms_since(f0);
  double max_frame = 0;
  int n_frames = 0;
  until_drawn(max_frame, n_frames);
  const double open_ms = ms_since(t_open);
  if (!s.keys.fig.valid() || s.keys.fig.figure().panels.size() < 3) {
    std::fprintf(stderr, "bench_gui: the keys view was not drawn with data\n");
    return 1;
  }
  std::printf(
      "  open: %.0f ms until the keys view is drawn with data (database + run list + run A light part %.0f ms, "
      "of which run A %.0f ms; first frame %.1f ms; %d frames while decoding, longest %.1f ms; %lld tokens, token "
      "texts %s)\n",
      open_ms, open_ui_ms, s.a->load_ms, first_frame_ms, n_frames, std::max(max_frame, first_frame_ms),
      static_cast<long long>(s.a->n_tok), s.a->tokens_from_tokenizer ? "from the tokenizer" : "as ids");
  const auto t_cmp = Clock::now();
  const auto b = same_prompt_run(s, 0);
  if (b >= 0) open_run(s, 0, b, true);
  std::printf("  open compare run B: %.0f ms\n", ms_since(t_cmp));

  std::printf("  %-10s %10s %10s %10s %8s %8s %12s %10s\n", "view", "data ms", "max frame", "steady ms", "p95 ms",
              "max ms", "reselect ms", "vertices");
  double worst = 0;
  std::string worst_view;
  for (View v : kAllViews) {
    if (v == View::kRun) continue;  // a form: no data-dependent drawing
    s.view = v;
    s.select_view = true;
    s.sel = {1, 1, -1};
    // First: frames until the view's parts are decoded and drawn (the UI keeps drawing meanwhile).
    double first_max = 0;
    int first_frames = 0;
    const double first = until_drawn(first_max, first_frames);
    std::vector<double> t;
    for (int f = 0; f < frames; ++f) {
      const ImVec2 mouse{40.0f + static_cast<float>((f * 37) % (width - 80)),
                         120.0f + static_cast<float>((f * 23) % (height - 200))};
      const auto t0 = Clock::now();
      im.frame([&] { draw_app(s, ui); }, mouse);
      t.push_back(ms_since(t0));
    }
    std::sort(t.begin(), t.end());
    double mean = 0;
    for (double x : t) mean += x;
    mean /= static_cast<double>(t.size());
    const double p95 = t[std::min(t.size() - 1, static_cast<std::size_t>(0.95 * static_cast<double>(t.size())))];
    // A selection change: another layer's parts decoded and the figure rebuilt.
    s.sel.head = 2;
    s.sel.layer = 2;
    double re_max = 0;
    int re_frames = 0;
    const double reselect = until_drawn(re_max, re_frames);
    std::printf("  %-10s %10.1f %10.1f %10.2f %8.2f %8.2f %12.1f %10d\n", std::string(view_name(v)).c_str(), first,
                std::max(first_max, re_max), mean, p95, t.back(), reselect, im.vertices());
    if (mean > worst) worst = mean, worst_view = std::string(view_name(v));
  }
  std::printf("  heaviest view: %s, %.2f ms per frame (CPU side; target <= 16 ms): %s\n", worst_view.c_str(), worst,
              worst <= 16.0 ? "ok" : "OVER");
  std::printf("  open: %.0f ms (target < 1000 ms): %s\n", open_ms, open_ms < 1000 ? "ok" : "OVER");
  return 0;
}
