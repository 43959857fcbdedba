// kvscope-cli export: render a figure of a recorded run through viz (Cairo PNG/SVG/PDF, or CSV).
#include <iostream>

#include "commands.h"
#include "export_figures.h"
#include "figure_table.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/viz/cairo_export.h"

namespace kvscope::cli {

Runner add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a figure of a run as PNG, SVG, PDF or CSV");
  struct Args {
    std::string db, figure, out, metric = "tokens95_frac";
    int64_t run = 0, layer = -1, head = -1, width = 0, height = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("FILE", a->db, "Session database")->required();
  cmd->add_option("RUN", a->run, "Run id (any run of the database for --figure grid)")->required();
  std::string names;
  for (const auto& n : figures::figure_names()) names += (names.empty() ? "" : " | ") + n;
  cmd->add_option("--figure", a->figure, names + " (see below)")->required();
  cmd->add_option("--out", a->out, "Output file: .png, .svg, .pdf or .csv")->required();
  cmd->add_option("--layer", a->layer, "Layer of per-layer figures (default 0; timeline: with --head, one head)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--head", a->head, "KV head of per-head figures (default 0)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--metric", a->metric, figures::metric_help());
  cmd->add_option("--width", a->width, "Figure width in px");
  cmd->add_option("--height", a->height, "Figure height in px");
  cmd->footer(figures::figure_help());
  return [a]() {
    const auto store = sessions::SessionStore::open(a->db, sessions::OpenMode::kReadOnly);
    figures::FigureRequest req{a->figure, a->layer, a->head, a->metric, {}, int(a->width)};
    // Token texts from the run's own tokenizer when its model is still where it was.
    std::shared_ptr<Tokenizer> tok;
    try {
      std::filesystem::path p = store.load_run(a->run).info.model.path;
      tok = load_tokenizer(std::filesystem::is_directory(p) ? p : p.parent_path());
    } catch (const std::exception&) {
    }
    if (tok) req.token_text = [tok](int32_t id) { return tok->token_text(id); };
    viz::Figure fig = figures::build_figure(store, a->run, req);
    if (a->width > 0) fig.width = int(a->width);
    if (a->height > 0) fig.height = int(a->height);
    viz::export_figure(fig, a->out);
    std::cout << "wrote " << a->out << "\n";
    return 0;
  };
}

}  // namespace kvscope::cli
