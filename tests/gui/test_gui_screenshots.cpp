// The real kvscope binary in --screenshot mode under Xvfb + Mesa, once per view:
//   xvfb-run -a -s "-screen 0 1600x1000x24" kvscope --open synthetic.db --view X
//            --screenshot out.png --frames 5 --size 1280x800
// The PNG must exist, have the requested size and not be blank (many distinct colours). Skipped
// when xvfb-run is not installed.
#include <cairo.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <unordered_set>

#include "gui_test_support.h"
#include "view_types.h"

namespace kvscope::gui {

// gtest parameter names: the view name.
void PrintTo(View v, std::ostream* os) { *os << view_name(v); }

namespace {

using testing::make_temp_dir;
using testing::remove_tree;

bool have_xvfb() { return std::system("command -v xvfb-run >/dev/null 2>&1") == 0; }

struct Png {
  int width = 0, height = 0;
  std::size_t colours = 0;
};

std::optional<Png> read_png(const std::string& path) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(s);
    return std::nullopt;
  }
  Png p;
  p.width = cairo_image_surface_get_width(s);
  p.height = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  std::unordered_set<std::uint32_t> seen;
  for (int y = 0; y < p.height; ++y) {
    const auto* row = reinterpret_cast<const std::uint32_t*>(data + static_cast<std::size_t>(y) * stride);
    for (int x = 0; x < p.width; ++x) seen.insert(row[x]);
  }
  p.colours = seen.size();
  cairo_surface_destroy(s);
  return p;
}

class GuiScreenshot : public ::testing::TestWithParam<View> {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("gui_shots");
    SyntheticSpec spec;
    spec.n_layer = 8;
    spec.n_head = 16;
    spec.n_head_kv = 8;
    spec.head_dim = 64;
    spec.n_tok = 700;
    testing::write_test_session(dir_ / "synthetic.db", spec);
  }
  static void TearDownTestSuite() { remove_tree(dir_); }
  static inline std::filesystem::path dir_;
};

TEST_P(GuiScreenshot, WritesANonBlankPngOfTheRequestedSize) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed";
  const std::string view(view_name(GetParam()));
  const auto out = dir_ / (view + ".png");
  const std::string cmd = "xvfb-run -a -s \"-screen 0 1600x1000x24\" '" + std::string(KVSCOPE_GUI) + "' --open '" +
                          (dir_ / "synthetic.db").string() + "' --view " + view + " --screenshot '" + out.string() +
                          "' --frames 5 --size 1280x800 > '" + (dir_ / (view + ".log")).string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n" << testing::read_text(dir_ / (view + ".log"));
  const auto png = read_png(out.string());
  ASSERT_TRUE(png) << "no readable PNG at " << out;
  EXPECT_EQ(png->width, 1280);
  EXPECT_EQ(png->height, 800);
  // A blank or failed frame has one or two colours; text alone gives dozens; figures hundreds.
  EXPECT_GE(png->colours, view_has_figure(GetParam()) ? 100u : 24u) << view;
}

INSTANTIATE_TEST_SUITE_P(Views, GuiScreenshot, ::testing::ValuesIn(kAllViews),
                         [](const ::testing::TestParamInfo<View>& i) { return std::string(view_name(i.param)); });

TEST(GuiScreenshotCli, BadArgumentsFailWithAMessage) {
  const std::string cmd = "'" + std::string(KVSCOPE_GUI) + "' --view nope 2>&1 | grep -q \"unknown view 'nope'\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  const std::string help = "'" + std::string(KVSCOPE_GUI) + "' --help | grep -q -- --screenshot";
  EXPECT_EQ(std::system(help.c_str()), 0);
}

}  // namespace
}  // namespace kvscope::gui
