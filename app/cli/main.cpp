// kvscope-cli: the headless workbench. Errors print one line naming the file and the problem and
// exit non-zero (error_report.h: 1 a run failed, 2 bad input).
#include "commands.h"
#include "error_report.h"
#include "process_guard.h"

// Before any library starts: resource limits end in one line, not a signal or a hang.
[[gnu::used, gnu::section(".preinit_array")]] static void (*const kvscope_guard)(int, char**, char**) =
    &kvscope::run::guard_process_before_libraries;

int main(int argc, char** argv) {
  kvscope::run::reserve_blas_buffers();
  CLI::App app{"kvscope-cli: KV-cache compression workbench (headless)"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, kvscope::cli::Runner>> runners;
  auto reg = [&](kvscope::cli::Runner r) { runners.emplace_back(app.get_subcommands({}).back(), std::move(r)); };
  reg(kvscope::cli::add_generate(app));
  reg(kvscope::cli::add_run(app));
  reg(kvscope::cli::add_policies(app));
  reg(kvscope::cli::add_sweep(app));
  reg(kvscope::cli::add_eval(app));
  reg(kvscope::cli::add_inspect(app));
  reg(kvscope::cli::add_compare(app));
  reg(kvscope::cli::add_merge(app));
  reg(kvscope::cli::add_check(app));
  reg(kvscope::cli::add_timeline(app));
  reg(kvscope::cli::add_learn_heads(app));
  reg(kvscope::cli::add_tokenize(app));
  reg(kvscope::cli::add_chat_template(app));
#ifdef KVSCOPE_HAVE_VIZ
  reg(kvscope::cli::add_export(app));
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return kvscope::cli::report_usage_error(app, e);
  }
  try {
    for (auto& [cmd, run] : runners)
      if (cmd->parsed()) return run();
  } catch (const std::exception& e) {
    return kvscope::cli::report_error(e);
  }
  return kvscope::cli::kExitSuccess;
}
