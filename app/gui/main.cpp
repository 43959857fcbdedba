// kvscope: the desktop workbench (GLFW + Dear ImGui + OpenGL 3). Opens session databases, shows
// what a compression pipeline did per head, runs new pipelines on a worker thread. With
// --screenshot it renders a few frames offscreen (an FBO of a hidden window: works under Xvfb +
// Mesa) and writes the last one as PNG, for tests and docs.
#include <cfloat>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#define GLFW_INCLUDE_NONE
#include <GL/gl.h>
#include <GL/glext.h>
#include <GLFW/glfw3.h>
#include <imgui.h>

#include "app_state.h"
#include "backends/imgui_impl_glfw.h"
#include "backends/imgui_impl_opengl3.h"
#include "headless.h"
#include "kvscope/core/policy.h"
#include "png_write.h"
#include "process_guard.h"

// Before any library starts: resource limits end in one line, not a signal or a hang.
[[gnu::used, gnu::section(".preinit_array")]] static void (*const kvscope_guard)(int, char**, char**) =
    &kvscope::run::guard_process_before_libraries;

namespace {

using namespace kvscope::gui;

/// OpenGL textures for figure images (GL 1.1 entry points: no loader needed).
class GlTextureStore final : public TextureStore {
 public:
  ImTextureID create(const kvscope::viz::Image& img, bool linear) override {
    GLuint id = 0;
    glGenTextures(1, &id);
    glBindTexture(GL_TEXTURE_2D, id);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, linear ? GL_LINEAR : GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, linear ? GL_LINEAR : GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
    glPixelStorei(GL_UNPACK_ALIGNMENT, 1);
    static_assert(sizeof(kvscope::viz::Color) == 4);
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, img.width, img.height, 0, GL_RGBA, GL_UNSIGNED_BYTE, img.pixels.data());
    return reinterpret_cast<ImTextureID>(static_cast<std::intptr_t>(id));
  }
  void destroy(ImTextureID tex) override {
    const auto id = static_cast<GLuint>(reinterpret_cast<std::intptr_t>(tex));
    glDeleteTextures(1, &id);
  }
};

/// An offscreen colour target for --screenshot (GL 3.0 framebuffer objects via glfwGetProcAddress).
struct Offscreen {
  PFNGLGENFRAMEBUFFERSPROC gen_fb = nullptr;
  PFNGLBINDFRAMEBUFFERPROC bind_fb = nullptr;
  PFNGLGENRENDERBUFFERSPROC gen_rb = nullptr;
  PFNGLBINDRENDERBUFFERPROC bind_rb = nullptr;
  PFNGLRENDERBUFFERSTORAGEPROC storage = nullptr;
  PFNGLFRAMEBUFFERRENDERBUFFERPROC attach = nullptr;
  PFNGLCHECKFRAMEBUFFERSTATUSPROC status = nullptr;
  GLuint fb = 0, rb = 0;
  bool ok = false;

  bool create(int w, int h) {
    gen_fb = reinterpret_cast<PFNGLGENFRAMEBUFFERSPROC>(glfwGetProcAddress("glGenFramebuffers"));
    bind_fb = reinterpret_cast<PFNGLBINDFRAMEBUFFERPROC>(glfwGetProcAddress("glBindFramebuffer"));
    gen_rb = reinterpret_cast<PFNGLGENRENDERBUFFERSPROC>(glfwGetProcAddress("glGenRenderbuffers"));
    bind_rb = reinterpret_cast<PFNGLBINDRENDERBUFFERPROC>(glfwGetProcAddress("glBindRenderbuffer"));
    storage = reinterpret_cast<PFNGLRENDERBUFFERSTORAGEPROC>(glfwGetProcAddress("glRenderbufferStorage"));
    attach = reinterpret_cast<PFNGLFRAMEBUFFERRENDERBUFFERPROC>(glfwGetProcAddress("glFramebufferRenderbuffer"));
    status = reinterpret_cast<PFNGLCHECKFRAMEBUFFERSTATUSPROC>(glfwGetProcAddress("glCheckFramebufferStatus"));
    if (!gen_fb || !bind_fb || !gen_rb || !bind_rb || !storage || !attach || !status) return false;
    gen_fb(1, &fb);
    bind_fb(GL_FRAMEBUFFER, fb);
    gen_rb(1, &rb);
    bind_rb(GL_RENDERBUFFER, rb);
    storage(GL_RENDERBUFFER, GL_RGBA8, w, h);
    attach(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, rb);
    ok = status(GL_FRAMEBUFFER) == GL_FRAMEBUFFER_COMPLETE;
    if (!ok) bind_fb(GL_FRAMEBUFFER, 0);
    return ok;
  }
};

[[maybe_unused]] std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void glfw_error(int code, const char* text) { std::fprintf(stderr, "kvscope: GLFW error %d: %s\n", code, text); }

}  // namespace

int main(int argc, char** argv) {
  kvscope::run::reserve_blas_buffers();
  GuiOptions opt;
  try {
    opt = parse_gui_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope: error: %s\n%s", e.what(), gui_usage().c_str());
    return 2;
  }
  if (opt.help) {
    std::cout << gui_usage();
    return 0;
  }
  const bool headless = !opt.screenshot.empty();

  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr, "kvscope: error: cannot initialise GLFW (no display? run under xvfb-run for --screenshot)\n");
    return 1;
  }
  // OpenGL 3.2 core: the ImGui backend then renders draw lists of more than 64K vertices with
  // 16-bit indices (ImGuiBackendFlags_RendererHasVtxOffset), which Debian's libimgui is built with.
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 2);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  GLFWwindow* window = glfwCreateWindow(opt.width, opt.height, "kvscope", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "kvscope: error: cannot create an OpenGL 3.2 window\n");
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(headless ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // layout is fixed; view state lives in the session database
  const FontSet fonts = load_fonts(*io.Fonts);
  io.FontDefault = fonts.ui;
  apply_style(ImGui::GetStyle());
  ImGui_ImplGlfw_InitForOpenGL(window, !headless);
  ImGui_ImplOpenGL3_Init("#version 150");
  if (!(io.BackendFlags & ImGuiBackendFlags_RendererHasVtxOffset))
    std::fprintf(stderr,
                 "kvscope: warning: OpenGL < 3.2: very dense views may exceed ImGui's 64K vertices per window\n");

  Offscreen off;
  if (headless && !off.create(opt.width, opt.height))
    std::fprintf(stderr, "kvscope: warning: no framebuffer objects; reading the window's back buffer\n");

  int rc = 0;
  {
    kvscope::PolicyRegistry registry;
    kvscope::register_builtin_policies(registry);
    const kvscope::PolicyCatalog& catalog = registry.catalog();
    RunWorker worker(registry);
    GlTextureStore textures;
    Ui ui{fonts, textures, &catalog, &worker};  // headless frames never click Run

    AppState s;
    s.headless = headless;
#ifdef KVSCOPE_SOURCE_DIR
    // Defaults of the Run window: the embedded model and one of its prompts.
    const std::filesystem::path model =
        (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "assets/models/pycode-16m").lexically_normal();
    if (std::filesystem::exists(model)) {
      s.run.form.model_path = model.string();
      s.run.form.prompt = read_file(model / "golden/prompts/argparse_head.py");
    }
#endif
    if (!apply_options(s, opt)) {
      std::fprintf(stderr, "kvscope: error: %s\n", s.status.c_str());
      if (headless) rc = 1;
    }
    if (s.run.form.db_path.empty()) s.run.form.db_path = "kvscope-sessions.db";
    if (rc == 0 && !opt.start_run.empty()) {
      try {
        read_run_request(opt.start_run, s.run.form);
        s.run.spec_text = s.run.form.pipeline_spec;  // the editor shows the run's pipeline
        s.run.pipeline_initialised = false;
        if (!opt.view) s.view = View::kRun, s.select_view = true;
        s.run.log.push_back("run: " +
                            (s.run.form.pipeline_spec.empty() ? std::string("full cache") : s.run.form.pipeline_spec));
        worker.start(s.run.form);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kvscope: error: %s\n", e.what());
        rc = 1;
      }
    }

    int frame = 0;
    double timed_ms = 0;  // headless: frames after the first two, GPU work included (glFinish)
    auto last = std::chrono::steady_clock::now();
    while (rc == 0 && !glfwWindowShouldClose(window) && !s.quit_requested) {
      const auto frame_start = std::chrono::steady_clock::now();
      if (headless)
        glfwPollEvents();
      else
        glfwWaitEventsTimeout(worker.busy() ? 1.0 / 60.0 : 0.1);
      if (off.ok) off.bind_fb(GL_FRAMEBUFFER, off.fb);
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      if (headless) {
        io.DisplaySize = {static_cast<float>(opt.width), static_cast<float>(opt.height)};
        io.DisplayFramebufferScale = {1, 1};
        io.MousePos = {-FLT_MAX, -FLT_MAX};
      }
      ImGui::NewFrame();
      draw_app(s, ui);
      ImGui::Render();
      int fb_w = opt.width, fb_h = opt.height;
      if (!off.ok) glfwGetFramebufferSize(window, &fb_w, &fb_h);
      glViewport(0, 0, fb_w, fb_h);
      glClearColor(0.98f, 0.98f, 0.98f, 1.0f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      if (headless) {
        glFinish();
        if (frame >= 2)
          timed_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - frame_start).count();
      }
      const auto now = std::chrono::steady_clock::now();
      s.frame_ms = std::chrono::duration<double, std::milli>(now - last).count();
      last = now;
      ++frame;
      // Screenshots show data: while the loader still decodes parts a view asked for, wait for it
      // and draw another frame (at most 20 more).
      if (headless && frame >= opt.frames && s.loader.busy() && frame < opt.frames + 20) {
        s.loader.wait_idle();
        continue;
      }
      // --start-run: the shot waits for the run (its step, or its end).
      if (headless && frame >= opt.frames && !opt.start_run.empty() && worker.busy() &&
          !(opt.screenshot_at_step >= 0 && s.run.live && s.run.live->decode_steps >= opt.screenshot_at_step)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (headless && frame >= opt.frames) {
        std::vector<std::uint8_t> px(static_cast<std::size_t>(fb_w) * fb_h * 4);
        glFinish();
        glReadBuffer(off.ok ? GL_COLOR_ATTACHMENT0 : GL_BACK);
        glPixelStorei(GL_PACK_ALIGNMENT, 1);
        glReadPixels(0, 0, fb_w, fb_h, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
        try {
          write_png(opt.screenshot, px, fb_w, fb_h, true);
          std::printf("wrote %s (%dx%d, view %s", opt.screenshot.c_str(), fb_w, fb_h,
                      std::string(view_name(s.view)).c_str());
          if (frame > 2) std::printf(", %.2f ms/frame over frames 3..%d incl. GPU", timed_ms / (frame - 2), frame);
          std::printf(")\n");
        } catch (const std::exception& e) {
          std::fprintf(stderr, "kvscope: error: %s\n", e.what());
          rc = 1;
        }
        break;
      }
      if (!headless) glfwSwapBuffers(window);
    }
    if (!headless) save_view_state(s);
  }  // figures release their textures here, while the GL context exists
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return rc;
}
